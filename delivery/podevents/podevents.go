// Package podevents records Events on the pod a pipeline serves, where `kubectl
// describe pod` shows them, and decides when a lasting failure deserves one again.
// Events are a courtesy, never a failure: without a pod name or without permission it
// only logs.
package podevents

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/trustsync/trustsync/delivery/kubeclient"
)

// Recorder is the piece of client-go's EventRecorder the stages use.
type Recorder interface {
	Warning(reason, message string)
	Normal(reason, message string)
}

// OnceRecorder records a Warning Event at most once per key.
type OnceRecorder interface {
	WarningOnce(key, reason, message string)
}

// PodRef names the pod Events are recorded on.
type PodRef struct {
	Namespace, Name, UID string
}

// PodRecorder records Events on one pod.
type PodRecorder struct {
	component string
	recorder  record.EventRecorder
	pod       *corev1.ObjectReference
	sink      sink
	clock     clock.PassiveClock
}

// Component is the source the sidecar's Events name.
const Component = "trustsync-sidecar"

// New records on ref through c until the returned stop is called. Without a pod name
// (run outside a pod) it records nothing.
func New(ctx context.Context, c rest.Interface, ref PodRef) (*PodRecorder, func()) {
	if ref.Name == "" || ref.Namespace == "" {
		return &PodRecorder{}, func() {}
	}
	b := NewBroadcaster(ctx, c, Component)
	return b.For(ref), b.Shutdown
}

// Broadcaster records Events on many pods through one client and one goroutine: the
// node agent's, for every pod on its node.
type Broadcaster struct {
	component   string
	broadcaster record.EventBroadcaster
	recorder    record.EventRecorder
	sink        sink
}

// NewBroadcaster records through c, as component, until Shutdown.
func NewBroadcaster(ctx context.Context, c rest.Interface, component string) *Broadcaster {
	b := record.NewBroadcaster(record.WithContext(ctx))
	b.StartRecordingToSink(sink{c: c})
	return &Broadcaster{component: component, broadcaster: b, recorder: b.NewRecorder(kubeclient.CoreScheme, corev1.EventSource{Component: component}), sink: sink{c: c}}
}

// For records on the pod ref.
func (b *Broadcaster) For(ref PodRef) *PodRecorder {
	return &PodRecorder{
		component: b.component,
		recorder:  b.recorder,
		pod:       &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: ref.Namespace, Name: ref.Name, UID: types.UID(ref.UID)},
		sink:      b.sink,
		clock:     clock.RealClock{},
	}
}

// Shutdown stops recording.
func (b *Broadcaster) Shutdown() { b.broadcaster.Shutdown() }

// WarningOnce records a Warning Event that the pod carries at most once per key: it is
// created under a name made of the pod's uid and key, so the API server refuses a
// second one while the first lasts (an hour, by default), whichever process asks. A
// restarted sidecar then does not repeat what the pod still shows. It does not wait for
// the API server.
func (p *PodRecorder) WarningOnce(key, reason, message string) {
	if p.recorder == nil {
		return
	}
	if p.pod.UID == "" {
		p.Warning(reason, message) // no uid to name it by: at most once per process
		return
	}
	now := metav1.NewTime(p.clock.Now())
	e := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: "trustsync-" + string(p.pod.UID) + "-" + key, Namespace: p.pod.Namespace},
		InvolvedObject: *p.pod,
		Reason:         reason,
		Message:        message,
		Type:           corev1.EventTypeWarning,
		Source:         corev1.EventSource{Component: p.component},
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

// Warning records a Warning Event; client-go's recorder aggregates repeats.
func (p *PodRecorder) Warning(reason, message string) {
	if p.recorder != nil {
		p.recorder.Event(p.pod, corev1.EventTypeWarning, reason, message)
	}
}

// Normal records a Normal Event.
func (p *PodRecorder) Normal(reason, message string) {
	if p.recorder != nil {
		p.recorder.Event(p.pod, corev1.EventTypeNormal, reason, message)
	}
}

// sink is client-go's record.EventSink over the core REST client.
type sink struct{ c rest.Interface }

func (s sink) Create(e *corev1.Event) (*corev1.Event, error) {
	out := &corev1.Event{}
	return out, s.c.Post().Namespace(e.Namespace).Resource("events").Body(e).Do(context.TODO()).Into(out)
}

func (s sink) Update(e *corev1.Event) (*corev1.Event, error) {
	out := &corev1.Event{}
	return out, s.c.Put().Namespace(e.Namespace).Resource("events").Name(e.Name).Body(e).Do(context.TODO()).Into(out)
}

func (s sink) Patch(e *corev1.Event, data []byte) (*corev1.Event, error) {
	out := &corev1.Event{}
	return out, s.c.Patch(types.StrategicMergePatchType).Namespace(e.Namespace).Resource("events").Name(e.Name).Body(data).Do(context.TODO()).Into(out)
}

// RepeatWarningTime is how often a lasting failure is recorded again, so it does not
// age out of the pod's Events.
const RepeatWarningTime = 10 * time.Minute

// Throttle decides when a lasting failure earns a Warning Event: when it is new or
// different, and again every RepeatWarningTime while it lasts; never once per retry.
type Throttle struct {
	Clock    clock.PassiveClock
	lastErr  string
	lastWarn time.Time
}

// Due reports whether msg should be recorded now, and notes that it was.
func (f *Throttle) Due(msg string) bool {
	if msg == f.lastErr && f.Clock.Since(f.lastWarn) <= RepeatWarningTime {
		return false
	}
	f.lastErr, f.lastWarn = msg, f.Clock.Now()
	return true
}

// Recovered reports whether a failure was being reported, and forgets it.
func (f *Throttle) Recovered() bool {
	was := f.lastErr != ""
	f.lastErr = ""
	return was
}
