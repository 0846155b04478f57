package sidecar

import (
	"context"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// coreScheme knows the six core/v1 types the sidecar reads and writes, nothing more.
// The sidecar runs in every pod that asks for trust, so it avoids client-go's
// clientset and its scheme of every API group, and even registering all of core/v1
// costs ~0.3 MiB of resident memory (docs/benchmarks.md).
var coreScheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	s.AddKnownTypes(corev1.SchemeGroupVersion,
		&corev1.ConfigMap{}, &corev1.ConfigMapList{}, &corev1.Secret{}, &corev1.SecretList{}, &corev1.Event{}, &corev1.EventList{})
	metav1.AddToGroupVersion(s, corev1.SchemeGroupVersion)
	return s
}()

// coreClient is a REST client for core/v1 alone: ConfigMaps, Secrets, Events.
func coreClient(base *rest.Config) (rest.Interface, error) {
	return restClientFor(base, "/api", corev1.SchemeGroupVersion, coreScheme)
}

// restClientFor is a REST client for one group version that decodes only what scheme
// knows.
func restClientFor(base *rest.Config, apiPath string, gv schema.GroupVersion, scheme *runtime.Scheme) (rest.Interface, error) {
	cfg := rest.CopyConfig(base)
	cfg.APIPath = apiPath
	cfg.GroupVersion = &gv
	cfg.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	return rest.RESTClientFor(cfg)
}

// eventSink is client-go's record.EventSink over the core REST client.
type eventSink struct{ c rest.Interface }

func (s eventSink) Create(e *corev1.Event) (*corev1.Event, error) {
	out := &corev1.Event{}
	return out, s.c.Post().Namespace(e.Namespace).Resource("events").Body(e).Do(context.TODO()).Into(out)
}

func (s eventSink) Update(e *corev1.Event) (*corev1.Event, error) {
	out := &corev1.Event{}
	return out, s.c.Put().Namespace(e.Namespace).Resource("events").Name(e.Name).Body(e).Do(context.TODO()).Into(out)
}

func (s eventSink) Patch(e *corev1.Event, data []byte) (*corev1.Event, error) {
	out := &corev1.Event{}
	return out, s.c.Patch(types.StrategicMergePatchType).Namespace(e.Namespace).Resource("events").Name(e.Name).Body(data).Do(context.TODO()).Into(out)
}

// podEvents records Events on the sidecar's pod. Without a pod name (run outside a
// pod) or without permission, it only logs: Events are a courtesy, never a failure.
type podEvents struct {
	recorder record.EventRecorder
	pod      *corev1.ObjectReference
	sink     eventSink
	clock    clock.PassiveClock
}

func newPodEvents(ctx context.Context, c rest.Interface, o *Options) (*podEvents, func()) {
	if o.PodName == "" || o.PodNamespace == "" {
		return &podEvents{}, func() {}
	}
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(eventSink{c: c})
	return &podEvents{
		recorder: broadcaster.NewRecorder(coreScheme, corev1.EventSource{Component: eventComponent}),
		pod:      &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: o.PodNamespace, Name: o.PodName, UID: types.UID(o.PodUID)},
		sink:     eventSink{c: c},
		clock:    clock.RealClock{},
	}, broadcaster.Shutdown
}

const eventComponent = "trustsync-sidecar"

// warningOnce records a Warning Event that the pod carries at most once per key: it is
// created under a name made of the pod's uid and key, so the API server refuses a
// second one while the first lasts (an hour, by default), whichever sidecar process
// asks. A restarted sidecar then does not repeat what the pod still shows. It does not
// wait for the API server.
func (p *podEvents) warningOnce(key, reason, message string) {
	if p.recorder == nil {
		return
	}
	if p.pod.UID == "" {
		p.warning(reason, message) // no uid to name it by: at most once per process
		return
	}
	now := metav1.NewTime(p.clock.Now())
	e := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: "trustsync-" + string(p.pod.UID) + "-" + key, Namespace: p.pod.Namespace},
		InvolvedObject: *p.pod,
		Reason:         reason,
		Message:        message,
		Type:           corev1.EventTypeWarning,
		Source:         corev1.EventSource{Component: eventComponent},
		FirstTimestamp: now,
		LastTimestamp:  now,
		Count:          1,
	}
	go func() {
		if _, err := p.sink.Create(e); err != nil && !apierrors.IsAlreadyExists(err) {
			klog.V(2).InfoS("Cannot record an Event on the pod", "reason", reason, "err", err)
		}
	}()
}

func (p *podEvents) warning(reason, message string) {
	if p.recorder != nil {
		p.recorder.Event(p.pod, corev1.EventTypeWarning, reason, message)
	}
}

func (p *podEvents) normal(reason, message string) {
	if p.recorder != nil {
		p.recorder.Event(p.pod, corev1.EventTypeNormal, reason, message)
	}
}

// csrScheme knows CertificateSigningRequests alone, for the workload certificate.
var csrScheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	s.AddKnownTypes(certificatesv1.SchemeGroupVersion, &certificatesv1.CertificateSigningRequest{}, &certificatesv1.CertificateSigningRequestList{})
	metav1.AddToGroupVersion(s, certificatesv1.SchemeGroupVersion)
	return s
}()

// csrClient is a REST client for certificates.k8s.io/v1 CertificateSigningRequests.
func csrClient(base *rest.Config) (rest.Interface, error) {
	return restClientFor(base, "/apis", certificatesv1.SchemeGroupVersion, csrScheme)
}
