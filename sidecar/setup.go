package sidecar

import (
	"context"
	goruntime "runtime"
	"runtime/debug"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/trustsync/trustsync/delivery/certificate"
	"github.com/trustsync/trustsync/delivery/kubeclient"
	"github.com/trustsync/trustsync/delivery/metrics"
	"github.com/trustsync/trustsync/delivery/observe"
	"github.com/trustsync/trustsync/delivery/pipeline"
	"github.com/trustsync/trustsync/delivery/podevents"
	"github.com/trustsync/trustsync/delivery/render"
	"github.com/trustsync/trustsync/delivery/watch"
	"github.com/trustsync/trustsync/delivery/write"
	"github.com/trustsync/trustsync/kubeapi"
)

// pod is the sidecar's one pipeline and what feeds it.
type pod struct {
	plan     *render.Plan
	registry *watch.Registry
	sources  *watch.Set
	// bundles says the plan reads bundles, whose served APIs are rediscovered.
	bundles  bool
	pipeline *pipeline.Pipeline
	cert     *certificate.Manager // nil without --certificate
	reload   *observe.Reloader    // nil unless the app is to be told of changes
	close    func()
}

// setup wires the pod's pipeline: its watches, the files a previous run left, the
// certificate, and its observers; m may be nil.
func setup(ctx context.Context, o *Options, m *metrics.Metrics) (*pod, error) {
	cfg, err := kubeapi.RESTConfig(o.Flags, "trustsync-sidecar")
	if err != nil {
		return nil, err
	}
	core, err := kubeclient.Core(cfg)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	p := &pod{}
	if p.plan, err = o.plan(); err != nil {
		return nil, err
	}
	p.registry = watch.New(ctx, dyn, kubeapi.RESTResourceLister{Client: core})
	if p.bundles = len(p.plan.Selectors()) > 0; p.bundles {
		served, err := p.registry.Discover(ctx)
		if err != nil {
			return nil, err
		}
		if len(served.APIs()) == 0 {
			klog.InfoS("Neither the native ClusterTrustBundle API nor trustsync's mirror CRD is served yet; bundle sources match nothing until one is", "rediscoveryInterval", o.APIDiscoveryInterval)
		}
	}
	if p.sources, err = p.registry.Acquire(watch.RequestFor(p.plan, core, "")); err != nil {
		return nil, err
	}
	events, stopEvents := podevents.New(ctx, core, podevents.PodRef{Namespace: o.PodNamespace, Name: o.PodName, UID: o.PodUID})
	p.close = func() { stopEvents(); p.sources.Close() }
	var targets []observe.Target
	if r := o.Spec.Reload; r != nil {
		if r.URL != "" {
			targets = append(targets, observe.NewURLTarget(r.URL))
		}
		if r.Signal != "" {
			targets = append(targets, observe.NewSignalTarget(r.Signal, r.Container))
		}
	}
	var csrs rest.Interface
	if o.Spec.Certificate != nil {
		if csrs, err = kubeclient.CSRs(cfg); err != nil {
			p.close()
			return nil, err
		}
	}
	a, err := pipeline.Assemble(pipeline.Parts{Spec: o.Spec, Plan: p.plan, Sources: p.sources, Writer: write.NewAtomicWriter(o.Spec.Dir), Events: events,
		Metrics: m, ReloadTargets: targets, CSRs: csrs, Identity: o.identity, PodName: o.PodName, PodUID: o.PodUID, Settled: startUpDone})
	if err != nil {
		p.close()
		return nil, err
	}
	p.pipeline, p.cert, p.reload = a.Pipeline, a.Cert, a.Reload
	return p, nil
}

// startUpDone hands what start-up (discovery, the initial lists, the first merges and
// encodings: the sidecar's peak) freed back to the OS rather than wait for the
// scavenger, since this process idles in every pod. Its log line is said once, at the
// default level: it is also the mark after which everything the start-up sync decided
// (the reload baseline among it) is done, which tests and people reading the log wait
// for.
func startUpDone() {
	debug.FreeOSMemory()
	var ms goruntime.MemStats
	goruntime.ReadMemStats(&ms)
	klog.InfoS("Start-up done: the files are current; returned start-up memory to the OS", "heapInUseKiB", ms.HeapInuse/1024, "heapReleasedKiB", ms.HeapReleased/1024, "stackKiB", ms.StackInuse/1024, "sysKiB", ms.Sys/1024)
}
