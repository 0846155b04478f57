package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	metadatafake "k8s.io/client-go/metadata/fake"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/injector"
	"github.com/trustsync/trustsync/tenancy/grantcache"
)

// realisticPod has what production pods carry: three containers with env, resources
// and mounts, five volumes, a pod security context.
func realisticPod() *corev1.Pod {
	container := func(name string) corev1.Container {
		return corev1.Container{
			Name: name, Image: "registry.example/" + name + ":1.2.3",
			Args: []string{"--listen=:8080", "--log-level=info"},
			Env: []corev1.EnvVar{
				{Name: "MODE", Value: "production"}, {Name: "REGION", Value: "eu-west-1"},
				{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
			},
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
			Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")},
				Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")},
			},
			VolumeMounts: []corev1.VolumeMount{{Name: "config", MountPath: "/etc/app"}, {Name: "cache", MountPath: "/cache"}},
		}
	}
	volume := func(name string) corev1.Volume {
		return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}
	}
	return &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: "web-7d9f8b6c5-",
			Labels:       map[string]string{"app": "web", "pod-template-hash": "7d9f8b6c5"},
			Annotations:  map[string]string{v1alpha1.AnnotationInject: "true", injector.AnnotationSignerName: "example.com/server-tls", injector.AnnotationSSLCertFile: "true"},
		},
		Spec: corev1.PodSpec{
			Containers:      []corev1.Container{container("web"), container("worker"), container("exporter")},
			Volumes:         []corev1.Volume{volume("config"), volume("cache"), volume("tmp"), volume("data"), volume("scratch")},
			SecurityContext: &corev1.PodSecurityContext{RunAsUser: ptrTo[int64](1000), RunAsGroup: ptrTo[int64](1000)},
		},
	}
}

func ptrTo[T any](v T) *T { return &v }

func podReviewBody(b *testing.B) []byte {
	raw, err := json.Marshal(realisticPod())
	if err != nil {
		b.Fatal(err)
	}
	body, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID: "bench", Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}, Resource: metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
			Namespace: "apps", Operation: admissionv1.Create, Object: runtime.RawExtension{Raw: raw},
		},
	})
	if err != nil {
		b.Fatal(err)
	}
	return body
}

// noopWebhook is the floor: decode the review, answer allowed.
func noopWebhook() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var ar admissionv1.AdmissionReview
		if err := json.NewDecoder(r.Body).Decode(&ar); err != nil || ar.Request == nil {
			http.Error(w, "bad review", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(admissionv1.AdmissionReview{TypeMeta: ar.TypeMeta, Response: &admissionv1.AdmissionResponse{UID: ar.Request.UID, Allowed: true}})
	})
}

// benchHTTPS drives handler over real TLS on loopback, with keep-alive connections
// and 8 concurrent clients (GOMAXPROCS × 4), and reports throughput and latency
// percentiles alongside Go's time and allocations per review (client and server).
func benchHTTPS(b *testing.B, handler http.Handler, body []byte, wantPatch bool) {
	srv := httptest.NewTLSServer(handler)
	defer srv.Close()
	client := srv.Client()
	client.Transport.(*http.Transport).MaxIdleConnsPerHost = 64

	var mu sync.Mutex
	var latencies []time.Duration
	b.SetParallelism(4)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		var local []time.Duration
		for pb.Next() {
			t0 := time.Now()
			resp, err := client.Post(srv.URL+routeMutatePods, "application/json", bytes.NewReader(body))
			if err != nil {
				b.Error(err)
				return
			}
			out, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			local = append(local, time.Since(t0))
			if resp.StatusCode != http.StatusOK || (wantPatch && !bytes.Contains(out, []byte(`"patch"`))) {
				b.Errorf("HTTP %d: %.200s", resp.StatusCode, out)
				return
			}
		}
		mu.Lock()
		latencies = append(latencies, local...)
		mu.Unlock()
	})
	elapsed := time.Since(start)
	b.StopTimer()
	slices.Sort(latencies)
	if n := len(latencies); n > 0 {
		b.ReportMetric(float64(n)/elapsed.Seconds(), "reviews/s")
		b.ReportMetric(float64(latencies[n/2].Microseconds()), "p50-µs")
		b.ReportMetric(float64(latencies[n*99/100].Microseconds()), "p99-µs")
	}
}

func BenchmarkMutatePods_HTTPS(b *testing.B) {
	s := podServer(b, nil)
	benchHTTPS(b, s.handler, podReviewBody(b), true)
}

func BenchmarkNoopWebhook_HTTPS(b *testing.B) {
	benchHTTPS(b, noopWebhook(), podReviewBody(b), false)
}

// BenchmarkMutatePods_Handler is the server's own share: one review through the
// handler in process, no network, no client.
func BenchmarkMutatePods_Handler(b *testing.B) {
	s := podServer(b, nil)
	body := podReviewBody(b)
	b.ReportAllocs()
	for b.Loop() {
		rec := httptest.NewRecorder()
		s.handler.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, routeMutatePods, bytes.NewReader(body)))
		if rec.Code != http.StatusOK {
			b.Fatal(rec.Body.String())
		}
	}
}

func BenchmarkNoopWebhook_Handler(b *testing.B) {
	h := noopWebhook()
	body := podReviewBody(b)
	b.ReportAllocs()
	for b.Loop() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, routeMutatePods, bytes.NewReader(body)))
	}
}

// BenchmarkMutatePodsVsNoop_HTTPS is the side-by-side run: injection and the no-op
// floor, as above, alternate in one-second rounds (eight pairs), so that a machine
// whose speed drifts (a shared VM) slows both alike; it reports the median of the
// per-pair throughput ratios and each side's median reviews per second.
func BenchmarkMutatePodsVsNoop_HTTPS(b *testing.B) {
	benchVsNoop(b, podServer(b, nil).handler)
}

// BenchmarkMutatePodsTenancyVsNoop_HTTPS is the same side-by-side run with tenancy
// enforced: 100 TrustPolicies and 1,000 namespaces watched by the real grant cache
// (over fake clients), the pod's namespace granted its signer by one of them.
func BenchmarkMutatePodsTenancyVsNoop_HTTPS(b *testing.B) {
	benchVsNoop(b, tenantPodHandler(b))
}

func benchVsNoop(b *testing.B, handler http.Handler) {
	body := podReviewBody(b)
	mutate, noop := httptest.NewTLSServer(handler), httptest.NewTLSServer(noopWebhook())
	defer mutate.Close()
	defer noop.Close()
	for b.Loop() {
		var ratios, mutated, floor []float64
		for range 8 {
			m := reviewsPerSecond(b, mutate, body, time.Second)
			n := reviewsPerSecond(b, noop, body, time.Second)
			mutated, floor, ratios = append(mutated, m), append(floor, n), append(ratios, m/n)
		}
		b.ReportMetric(median(ratios), "ratio")
		b.ReportMetric(median(mutated), "inject-reviews/s")
		b.ReportMetric(median(floor), "noop-reviews/s")
	}
}

// reviewsPerSecond drives srv with 8 keep-alive clients for d and returns the rate of
// reviews answered.
func reviewsPerSecond(b *testing.B, srv *httptest.Server, body []byte, d time.Duration) float64 {
	client := srv.Client()
	client.Transport.(*http.Transport).MaxIdleConnsPerHost = 64
	var answered atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(d)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				resp, err := client.Post(srv.URL+routeMutatePods, "application/json", bytes.NewReader(body))
				if err != nil {
					b.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					b.Errorf("HTTP %d", resp.StatusCode)
					return
				}
				answered.Add(1)
			}
		}()
	}
	wg.Wait()
	return float64(answered.Load()) / time.Since(start).Seconds()
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// tenantPodHandler serves pods with tenancy enforced by grantcache, over 100 policies
// (policy-N selects team=N and grants example.com/server-tls's bundles and
// certificates) and 1,000 namespaces (apps is team 42).
func tenantPodHandler(b *testing.B) http.Handler {
	b.Helper()
	var policies, namespaces []runtime.Object
	for i := range 100 {
		policies = append(policies, &unstructured.Unstructured{Object: map[string]any{"apiVersion": v1alpha1.GroupVersion.String(), "kind": "TrustPolicy",
			"metadata": map[string]any{"name": fmt.Sprintf("policy-%d", i)},
			"spec": map[string]any{"namespaceSelector": map[string]any{"matchLabels": map[string]any{"team": fmt.Sprint(i)}},
				"bundles": []any{map[string]any{"signerName": "example.com/server-tls"}, map[string]any{"name": fmt.Sprintf("team-%d-root", i)}},
				"signers": []any{map[string]any{"signerName": "example.com/server-tls", "dnsNames": []any{"*.svc"}}}}}})
	}
	for i := range 1000 {
		name := fmt.Sprintf("ns-%d", i)
		if i == 0 {
			name = "apps"
		}
		namespaces = append(namespaces, &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"},
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"team": fmt.Sprint((i + 42) % 100)}}})
	}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{v1alpha1.TrustPolicyResource: "TrustPolicyList"}, policies...)
	scheme := runtime.NewScheme()
	_ = metav1.AddMetaToScheme(scheme)
	meta := metadatafake.NewSimpleMetadataClient(scheme, namespaces...)
	c, err := grantcache.New(dyn, meta, "trustsync-system", 0)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	go c.Run(ctx)
	for !c.HasSynced() {
		time.Sleep(10 * time.Millisecond)
	}
	if g, _, err := c.For(ctx, "apps"); err != nil || len(g.Signers) != 1 {
		b.Fatalf("apps' grants: %+v, %v; want policy-42's", g, err)
	}
	h := enforcingPodServer(b, nil, c.For, c.Bundle).handler
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, routeMutatePods, bytes.NewReader(podReviewBody(b))))
	if !strings.Contains(rec.Body.String(), `"allowed":true`) {
		b.Fatalf("the granted pod is not admitted: %s", rec.Body.String())
	}
	return h
}
