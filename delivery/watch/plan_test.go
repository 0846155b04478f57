package watch

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/delivery/render"
)

// holder holds every bundle under every key, and the objects it is given.
type holder struct {
	bundles    []*certificatesv1.ClusterTrustBundle
	configMaps map[string]*corev1.ConfigMap
	secrets    map[string]*corev1.Secret
}

func (h holder) Bundles(string) []*certificatesv1.ClusterTrustBundle { return h.bundles }
func (h holder) ConfigMap(name string) (*corev1.ConfigMap, bool) {
	cm, ok := h.configMaps[name]
	return cm, ok
}
func (h holder) Secret(name string) (*corev1.Secret, bool) {
	s, ok := h.secrets[name]
	return s, ok
}

func ctb(name string) *certificatesv1.ClusterTrustBundle {
	return &certificatesv1.ClusterTrustBundle{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

func TestSnapshotOf_HoldsWhatThePlanReadsAndWhatAdmitLetsThrough(t *testing.T) {
	plan, err := render.NewPlan([]v1alpha1.Source{
		{Name: "corp-root", Path: "ca.pem"},
		{ConfigMap: &v1alpha1.KeyRef{Name: "present", Key: "ca.crt"}, Path: "cm.pem"},
		{ConfigMap: &v1alpha1.KeyRef{Name: "absent", Key: "ca.crt"}, Path: "cm.pem"},
		{Secret: &v1alpha1.KeyRef{Name: "tls", Key: "ca.crt"}, Path: "secret.pem"},
	}, "team-a", false)
	if err != nil {
		t.Fatal(err)
	}
	h := holder{
		bundles:    []*certificatesv1.ClusterTrustBundle{ctb("corp-root"), ctb("refused")},
		configMaps: map[string]*corev1.ConfigMap{"present": {}, "unasked": {}},
		secrets:    map[string]*corev1.Secret{"tls": {}},
	}
	for _, tc := range []struct {
		name               string
		admit              func(*certificatesv1.ClusterTrustBundle) error
		bundles            []string
		refused, undecided int
	}{
		{name: "without admit every bundle held is rendered", bundles: []string{"corp-root", "refused"}},
		{name: "a bundle admit refuses is held apart as refused", admit: func(b *certificatesv1.ClusterTrustBundle) error {
			if b.Name == "refused" {
				return errors.New("not granted")
			}
			return nil
		}, bundles: []string{"corp-root"}, refused: 1},
		{name: "a bundle admit cannot decide is held apart as undecided", admit: func(b *certificatesv1.ClusterTrustBundle) error {
			if b.Name == "refused" {
				return fmt.Errorf("%w: grants not listed", ErrUndecided)
			}
			return nil
		}, bundles: []string{"corp-root"}, undecided: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := SnapshotOf(plan, h, tc.admit)
			for key, got := range s.Bundles {
				var names []string
				for _, b := range got {
					names = append(names, b.Name)
				}
				if !slices.Equal(names, tc.bundles) {
					t.Errorf("bundles of %s = %v, want %v", key, names, tc.bundles)
				}
			}
			count := func(m map[string][]*certificatesv1.ClusterTrustBundle) (n int) {
				for _, bs := range m {
					n += len(bs)
				}
				return n
			}
			if count(s.Refused) != tc.refused || count(s.Undecided) != tc.undecided {
				t.Errorf("%d refused, %d undecided; want %d, %d", count(s.Refused), count(s.Undecided), tc.refused, tc.undecided)
			}
			if len(s.Bundles) != len(plan.Selectors()) {
				t.Errorf("%d selections in the snapshot, want the plan's %d", len(s.Bundles), len(plan.Selectors()))
			}
			if _, ok := s.ConfigMaps["present"]; !ok || len(s.ConfigMaps) != 1 {
				t.Errorf("ConfigMaps = %v, want the plan's one that exists (an absent one is no entry; one not asked is not read)", s.ConfigMaps)
			}
			if _, ok := s.Secrets["tls"]; !ok || len(s.Secrets) != 1 {
				t.Errorf("Secrets = %v, want tls", s.Secrets)
			}
		})
	}
	if len(h.bundles) != 2 {
		t.Errorf("admit changed the holder's own list")
	}
}

func TestRequestFor_AsksForEverySourceThePlanReads(t *testing.T) {
	plan, err := render.NewPlan([]v1alpha1.Source{
		{Name: "corp-root", Path: "ca.pem"},
		{ConfigMap: &v1alpha1.KeyRef{Name: "cm", Key: "ca.crt"}, Path: "ca.pem"},
		{Secret: &v1alpha1.KeyRef{Name: "tls", Key: "ca.crt"}, Path: "ca.pem"},
	}, "team-a", false)
	if err != nil {
		t.Fatal(err)
	}
	req := RequestFor(plan, nil, "pod-uid")
	if len(req.Bundles) != len(plan.Selectors()) || req.Namespace != "team-a" || !slices.Equal(req.ConfigMaps, []string{"cm"}) || !slices.Equal(req.Secrets, []string{"tls"}) || req.ClientKey != "pod-uid" {
		t.Errorf("RequestFor = %+v, want the plan's one selection, ConfigMap cm and Secret tls in team-a, as pod-uid", req)
	}
}
