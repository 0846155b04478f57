package agent

import (
	"context"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"k8s.io/client-go/rest"

	"github.com/trustsync/trustsync/agent/store"
	"github.com/trustsync/trustsync/delivery/certificate"
	"github.com/trustsync/trustsync/delivery/contract"
	"github.com/trustsync/trustsync/delivery/kubeclient"
	"github.com/trustsync/trustsync/delivery/observe"
	"github.com/trustsync/trustsync/delivery/pipeline"
	"github.com/trustsync/trustsync/delivery/podevents"
	"github.com/trustsync/trustsync/delivery/render"
	"github.com/trustsync/trustsync/delivery/watch"
	"github.com/trustsync/trustsync/delivery/write"
)

// volume is one published volume's pipeline and what feeds it: the sidecar's
// pipeline, over the agent's shared watches, with the pod's own credentials for what
// is not public.
type volume struct {
	rec      store.Record
	plan     *render.Plan
	sources  *watch.Set
	pipeline *pipeline.Pipeline
	cert     *certificate.Manager // nil without a certificate
	reload   *observe.Reloader    // nil unless the app is to be told of changes
	// needsToken: the volume reads with the pod's token, which a republish renews.
	needsToken bool
	// recheck asks the pipeline to sync when the grants changed (nil without
	// tenancy); one pending ask stands for any number.
	recheck chan struct{}
	cancel  context.CancelFunc
	done    chan struct{}
}

// readsWithPodToken says whether spec reads anything with the pod's own credentials:
// ConfigMaps, Secrets (password Secrets among them), or a certificate requested in
// the pod's name. Bundles alone need no token: they are public.
func readsWithPodToken(plan *render.Plan, spec contract.Spec) bool {
	return len(plan.ConfigMaps()) > 0 || len(plan.Secrets()) > 0 || spec.Certificate != nil
}

// spec reads the Spec and plan of volumeID's attributes, writing into the volume's
// own directories.
func (m *Manager) spec(volumeID string, attrs map[string]string, namespace string) (contract.Spec, *render.Plan, error) {
	spec, err := contract.SpecFromAttributes(attrs, m.store.Files(volumeID), m.store.State(volumeID))
	if err != nil {
		return spec, nil, err
	}
	plan, err := render.NewPlan(spec.Sources, namespace, spec.Certificate != nil)
	return spec, plan, err
}

// volumeOf assembles the pipeline of a volume a previous agent kept (rec).
func (m *Manager) volumeOf(rec store.Record) (*volume, error) {
	spec, plan, err := m.spec(rec.VolumeID, rec.Attributes, rec.Pod.Namespace)
	if err != nil {
		return nil, err
	}
	return m.newVolume(rec, spec, plan)
}

// newVolume assembles rec's pipeline from its spec and plan; nothing runs until first
// and run.
func (m *Manager) newVolume(rec store.Record, spec contract.Spec, plan *render.Plan) (*volume, error) {
	id := rec.VolumeID
	var err error
	v := &volume{rec: rec, plan: plan, needsToken: readsWithPodToken(plan, spec), done: make(chan struct{})}
	if m.cfg.Grants != nil {
		v.recheck = make(chan struct{}, 1)
	}
	// The identity first: a trust domain go-spiffe refuses fails the volume before
	// anything reaches the API server.
	var identity spiffeid.ID
	if c := spec.Certificate; c != nil {
		if identity, err = c.Identity(rec.Pod.Namespace, rec.Pod.ServiceAccount); err != nil {
			return nil, err
		}
	}
	// The pod's own token, read anew from its file as the kubelet renews it: a pod
	// gets through the agent what its own RBAC allows, and no more.
	var core, csrs rest.Interface
	if v.needsToken {
		cfg := rest.AnonymousClientConfig(m.cfg.REST)
		cfg.BearerTokenFile = m.store.TokenFile(id)
		if core, err = kubeclient.Core(cfg); err != nil {
			return nil, err
		}
		if csrs, err = kubeclient.CSRs(cfg); err != nil {
			return nil, err
		}
	}
	if v.sources, err = m.cfg.Registry.Acquire(watch.RequestFor(v.plan, core, rec.Pod.UID)); err != nil {
		return nil, err
	}
	writer := write.NewAtomicWriter(m.store.Files(id))
	if o := rec.Owner; o != nil {
		writer.Owner = &write.Owner{UID: o.UID, GID: o.GID}
	}
	var targets []observe.Target
	if r := spec.Reload; r != nil && r.URL != "" {
		podIP := func() (string, error) { return m.cfg.Pods.IP(rec.Pod.Namespace, rec.Pod.Name, rec.Pod.UID) }
		targets = append(targets, observe.NewPodURLTarget(r.URL, podIP))
	}
	a, err := pipeline.Assemble(pipeline.Parts{Spec: spec, Plan: v.plan, Sources: v.sources, Writer: writer,
		Events:   m.cfg.Events.For(podevents.PodRef{Namespace: rec.Pod.Namespace, Name: rec.Pod.Name, UID: rec.Pod.UID}),
		Observer: m.metrics.observer(), ReloadTargets: targets, CSRs: csrs,
		Identity: identity, PodName: rec.Pod.Name, PodUID: rec.Pod.UID, Admit: m.admit(rec.Pod.Namespace), Recheck: v.recheck})
	if err != nil {
		v.sources.Close()
		return nil, err
	}
	v.pipeline, v.cert, v.reload = a.Pipeline, a.Cert, a.Reload
	return v, nil
}

// first writes the volume's files once, before the pod may start: it waits for the
// sources to list and the certificate to be issued, and fails, saying why, when a
// required file cannot be written. It runs on the goroutine that will own the
// pipeline.
func (v *volume) first(ctx context.Context, within string) error {
	return v.pipeline.FirstSync(ctx, v.sources, v.cert, within)
}

// run keeps the files current until ctx is done.
func (v *volume) run(ctx context.Context) {
	defer close(v.done)
	if v.cert != nil {
		go v.cert.Run(ctx, v.pipeline.Offers())
	}
	if v.reload != nil {
		go v.reload.Run(ctx)
	}
	v.pipeline.Run(ctx)
}

// stop ends the pipeline and lets go of its watches.
func (v *volume) stop() {
	if v.cancel != nil {
		v.cancel()
		<-v.done
	}
	v.sources.Close()
}
