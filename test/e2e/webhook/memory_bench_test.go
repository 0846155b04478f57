package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/trustsync/trustsync/test/controlplane"
)

// largeReview is a pod review of just under the 6 MiB limit: an injectable pod with
// one large annotation, as a hostile or careless client might send.
func largeReview(b *testing.B) []byte {
	pod := &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: "big", Namespace: "apps", Annotations: map[string]string{
			"trustsync.io/inject": "true", "trustsync.io/bundle-name": "corp", "example.com/filler": strings.Repeat("a", 6<<20-4096),
		}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}}},
	}
	return createReview(b, pod, "apps")
}

// createReview is the API server's review of creating pod in namespace.
func createReview(b *testing.B, pod *corev1.Pod, namespace string) []byte {
	raw, err := json.Marshal(pod)
	if err != nil {
		b.Fatal(err)
	}
	body, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID: types.UID("review-of-" + pod.Name + pod.GenerateName), Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
			Resource: metav1.GroupVersionResource{Version: "v1", Resource: "pods"}, Namespace: namespace,
			Operation: admissionv1.Create, Object: runtime.RawExtension{Raw: raw},
		},
	})
	if err != nil {
		b.Fatal(err)
	}
	return body
}

// BenchmarkLargeReviews_PeakRSS sends 16 and 32 concurrent pod reviews of just under
// 6 MiB to a freshly started trustsync-webhook process and reports its peak resident
// memory (VmHWM) and how many reviews were answered 200, with the default bound on
// review bytes in flight and with the bound lifted (1 GiB), for comparison.
func BenchmarkLargeReviews_PeakRSS(b *testing.B) {
	_, w := env(b, true)
	body := largeReview(b)
	for _, bound := range []struct {
		name  string
		flags []string
	}{{"bounded", nil}, {"unbounded", []string{"--max-review-bytes-in-flight=1073741824"}}} {
		for _, n := range []int{16, 32} {
			b.Run(fmt.Sprintf("%s/concurrent=%d", bound.name, n), func(b *testing.B) {
				for b.Loop() {
					w.Stop()
					if err := w.Start(bound.flags...); err != nil {
						b.Fatal(err)
					}
					client := w.Client()
					client.Timeout = 2 * time.Minute
					var wg sync.WaitGroup
					var mu sync.Mutex
					ok := 0
					for range n {
						wg.Add(1)
						go func() {
							defer wg.Done()
							resp, err := client.Post(w.URL("/mutate/pods"), "application/json", bytes.NewReader(body))
							if err != nil {
								return
							}
							resp.Body.Close()
							if resp.StatusCode == http.StatusOK {
								mu.Lock()
								ok++
								mu.Unlock()
							}
						}()
					}
					wg.Wait()
					hwm, err := controlplane.ProcStatusKiB(w.Process.Pid(), "VmHWM:")
					if err != nil {
						b.Fatal(err)
					}
					b.ReportMetric(float64(hwm)/1024, "peak-MiB")
					b.ReportMetric(float64(ok), "answered")
				}
			})
		}
	}
	// Leave the shared webhook as the other tests expect it.
	w.Stop()
	if err := w.Start(); err != nil {
		b.Fatal(err)
	}
}

// podReview is a review of an ordinary injectable pod, as a Deployment's pods are
// sent: three containers with env, resources and mounts, generateName.
func podReview(b *testing.B, namespace string) []byte {
	container := func(name string) corev1.Container {
		return corev1.Container{
			Name: name, Image: "registry.example/" + name + ":1.2.3", Args: []string{"--listen=:8080"},
			Env:          []corev1.EnvVar{{Name: "MODE", Value: "production"}, {Name: "REGION", Value: "eu-west-1"}},
			Ports:        []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
			VolumeMounts: []corev1.VolumeMount{{Name: "config", MountPath: "/etc/app"}},
		}
	}
	pod := &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{GenerateName: "web-7d9f8b6c5-", Labels: map[string]string{"app": "web"}, Annotations: map[string]string{
			"trustsync.io/inject": "true", "trustsync.io/bundle-name": "corp", "trustsync.io/ssl-cert-file": "true",
		}},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{container("web"), container("worker"), container("exporter")},
			Volumes:    []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
		},
	}
	return createReview(b, pod, namespace)
}

// BenchmarkPodReviews_PeakRSS drives a freshly started trustsync-webhook process (as
// released) with 16 concurrent clients sending ordinary pod reviews over keep-alive
// HTTPS for 10 seconds, and reports its peak resident memory (VmHWM) and the reviews
// it answered per second: the webhook's memory under sustained load. The pods'
// namespace exists, so its defaults come from the webhook's cache, as in a cluster.
func BenchmarkPodReviews_PeakRSS(b *testing.B) {
	cp, w := env(b, true)
	const namespace = "bench-pods"
	client, err := kubernetes.NewForConfig(cp.AdminConfig())
	if err != nil {
		b.Fatal(err)
	}
	if _, err := client.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		b.Fatal(err)
	}
	body := podReview(b, namespace)
	for b.Loop() {
		w.Stop()
		if err := w.Start(); err != nil {
			b.Fatal(err)
		}
		idle, err := controlplane.ProcStatusKiB(w.Process.Pid(), "VmRSS:")
		if err != nil {
			b.Fatal(err)
		}
		client := w.Client()
		// Keep-alive, as the API server keeps its connections to a webhook.
		client.Transport.(*http.Transport).DisableKeepAlives = false
		client.Transport.(*http.Transport).MaxIdleConnsPerHost = 16
		var answered, failed atomicCounter
		deadline := time.Now().Add(10 * time.Second)
		var wg sync.WaitGroup
		for range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(deadline) {
					resp, err := client.Post(w.URL("/mutate/pods"), "application/json", bytes.NewReader(body))
					if err != nil {
						failed.add()
						continue
					}
					out, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK || !bytes.Contains(out, []byte(`"patch"`)) {
						failed.add()
						continue
					}
					answered.add()
				}
			}()
		}
		wg.Wait()
		hwm, err := controlplane.ProcStatusKiB(w.Process.Pid(), "VmHWM:")
		if err != nil {
			b.Fatal(err)
		}
		if failed.get() > 0 {
			b.Errorf("%d reviews were not answered with a patch", failed.get())
		}
		b.ReportMetric(float64(idle)/1024, "idle-MiB")
		b.ReportMetric(float64(hwm)/1024, "peak-MiB")
		b.ReportMetric(float64(answered.get())/10, "reviews/s")
	}
}

type atomicCounter struct{ n atomic.Int64 }

func (c *atomicCounter) add()       { c.n.Add(1) }
func (c *atomicCounter) get() int64 { return c.n.Load() }
