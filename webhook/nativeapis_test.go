package webhook

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustsync/trustsync/injector"
)

// answers serves each discovery the next of its answers, the last one again after.
type answers struct {
	mu    sync.Mutex
	each  []func() (*metav1.APIResourceList, error)
	asked int
}

func (a *answers) ServerResourcesForGroupVersion(string) (*metav1.APIResourceList, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	i := min(a.asked, len(a.each)-1)
	a.asked++
	return a.each[i]()
}

func (a *answers) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.asked
}

func TestNativeAPIs_AnOutageKeepsTheLastAnswer(t *testing.T) {
	both := func() (*metav1.APIResourceList, error) {
		return &metav1.APIResourceList{APIResources: []metav1.APIResource{{Name: "clustertrustbundles"}, {Name: "podcertificaterequests"}}}, nil
	}
	outage := func() (*metav1.APIResourceList, error) { return nil, errors.New("connection refused") }
	lister := &answers{each: []func() (*metav1.APIResourceList, error){outage, both, outage}}
	n := &nativeAPIs{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go n.run(ctx, lister, time.Millisecond)
	for lister.count() < 10 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if got, want := n.get(), (injector.NativeAPIs{ClusterTrustBundles: true, PodCertificates: true}); got != want {
		t.Errorf("after an answer and then an outage, native APIs = %+v; want the answer kept, %+v", got, want)
	}
}
