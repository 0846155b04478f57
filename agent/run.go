// Package agent is trustsync's node agent: a CSI node plugin (driver csi.trustsync.io)
// for ephemeral inline volumes, one process per node, that delivers to every pod on
// its node what the sidecar delivers to one. Each volume runs the sidecar's pipeline
// (package delivery/pipeline) over the agent's one set of watches (package
// delivery/watch), so bundles cost a watch per node, not per pod; what is not public
// (ConfigMaps, Secrets, a certificate) is read and requested with the pod's own
// ServiceAccount token, which the kubelet passes with each publish.
package agent

import (
	"context"
	"fmt"
	"os"
	"path"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/trustsync/trustsync/agent/csi"
	"github.com/trustsync/trustsync/agent/holdings"
	"github.com/trustsync/trustsync/agent/mounts"
	"github.com/trustsync/trustsync/agent/registration"
	"github.com/trustsync/trustsync/agent/store"
	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/delivery/kubeclient"
	"github.com/trustsync/trustsync/delivery/podevents"
	"github.com/trustsync/trustsync/delivery/watch"
	"github.com/trustsync/trustsync/kubeapi"
	"github.com/trustsync/trustsync/kubeapi/healthserver"
	"github.com/trustsync/trustsync/tenancy/grantcache"
	"github.com/trustsync/trustsync/trustreport/reader"
)

// Version is the agent's version, as the CSI driver reports it.
var Version = "v0.1.0"

// CSIVersions are the CSI spec versions the agent serves.
var CSIVersions = []string{"1.0.0"}

// Run serves the node until ctx is done (SIGTERM). The volumes' mounts and files stay
// when it stops: the pods keep reading them, and the next agent adopts them.
func Run(ctx context.Context, o *Options) error {
	if err := o.Validate(); err != nil {
		return err
	}
	cfg, err := kubeapi.RESTConfig(o.Flags, "trustsync-agent")
	if err != nil {
		return err
	}
	podsClient, err := kubeclient.Pods(cfg)
	if err != nil {
		return err
	}
	core, err := kubeclient.Core(cfg)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	mounter := mounts.System{}
	if err := prepareDataDir(o, mounter); err != nil {
		return err
	}

	registry := prometheus.NewRegistry()
	registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m := NewMetrics()
	m.Register(registry)
	reg := &registration.Server{Driver: DriverName, Endpoint: o.KubeletEndpoint, Versions: CSIVersions}
	pods := NewNodePods(podsClient, o.NodeName)
	var grants *grantcache.Cache
	if o.TenancyEnforced {
		if grants, err = grantcache.NewForConfig(cfg, o.Namespace, 10*time.Minute); err != nil {
			return err
		}
	}
	notReady := func() string {
		switch {
		case !pods.HasSynced():
			return "the node's pods have not listed yet"
		case grants != nil && !grants.HasSynced():
			return "the TrustPolicies, namespaces and bundles' labels (--tenancy-enforced) have not listed yet"
		case o.RegistrationDir != "" && !reg.Registered():
			// The usual cause: the kubelet's root directory is not where the chart
			// mounted it from, so the kubelet never sees the registration socket and
			// pods get "driver name csi.trustsync.io not found".
			kubeletDir := path.Dir(path.Dir(path.Dir(o.KubeletEndpoint))) // <dir>/plugins/<driver>/csi.sock
			return fmt.Sprintf("the kubelet has not registered the CSI driver %s: it registers the plugins whose sockets appear in its plugins_registry directory, and this agent's socket (in %s, the node's %s/plugins_registry) got no call; if the kubelet's root directory (its --root-dir) is not %s, set the chart's agent.kubeletDir to it, or pods asking for delivery node see \"driver name %s not found\"",
				DriverName, o.RegistrationDir, kubeletDir, kubeletDir, DriverName)
		}
		return ""
	}
	ready := func() bool { return notReady() == "" }
	if err := healthserver.Serve(ctx, o.HealthAddress, registry, notReady); err != nil {
		return err
	}

	watches := watch.New(ctx, dyn, kubeapi.RESTResourceLister{Client: core})
	served, err := watches.Discover(ctx)
	if err != nil {
		return err
	}
	mcfg := Config{
		NodeName: o.NodeName, Store: store.Store{Root: o.DataDir}, Mounter: mounter, REST: cfg, Registry: watches, Pods: pods,
		TokenAudience: o.TokenAudience, FirstSyncTimeout: o.FirstSyncTimeout,
	}
	if grants != nil {
		if err := grants.WatchBundles(served, 10*time.Minute); err != nil {
			return err
		}
		go grants.Run(ctx)
		mcfg.Grants, mcfg.Bundles = grants.For, grants.Bundle
		klog.InfoS("Enforcing TrustPolicies on volumes", "exempt", o.Namespace, "bundleAPIs", served.APIs())
	}
	go watches.Run(ctx, o.DiscoveryEvery)
	go pods.Run(ctx)
	synced := []cache.InformerSynced{pods.HasSynced}
	if grants != nil {
		synced = append(synced, grants.HasSynced)
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return nil // stopping before the pods (and grants) listed
	}
	events := podevents.NewBroadcaster(ctx, core, "trustsync-agent")
	defer events.Shutdown()
	mcfg.Events = events
	manager := NewManager(ctx, mcfg, m)
	if grants != nil {
		grants.OnGrantsChange(manager.GrantsChanged)
	}
	if err := manager.Adopt(ctx); err != nil {
		return err
	}
	go manager.Reap(ctx, o.ReapEvery)
	if o.PodsDir != "" {
		meta, err := metadata.NewForConfig(cfg)
		if err != nil {
			return err
		}
		index, _ := v1alpha1.ParseInjectedIndexRef(o.InjectedIndex) // checked by Validate
		objects, err := reader.NewTrustObjects(reader.TrustObjectsConfig{Dynamic: dyn, Metadata: meta, Core: core, Index: index, Resync: 10 * time.Minute})
		if err != nil {
			return err
		}
		go objects.Run(ctx)
		publisher, err := newReportPublisher(ctx, o, podsClient, dyn, pods, objects, m, events)
		if err != nil {
			return err
		}
		go publisher.Run(ctx)
	}

	var wg sync.WaitGroup
	errs := make(chan error, 2)
	serve := func(f func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(); err != nil {
				errs <- err
			}
		}()
	}
	csiServer := &csi.Server{Driver: DriverName, Version: Version, NodeID: o.NodeName, Volumes: manager, Ready: ready}
	serve(func() error { return csi.Serve(ctx, o.Endpoint, csiServer) })
	if o.RegistrationDir != "" {
		serve(func() error { return registration.Serve(ctx, o.RegistrationDir, reg) })
	}
	klog.InfoS("Agent serving", "node", o.NodeName, "driver", DriverName, "dataDir", o.DataDir, "watches", watches.Watches())
	select {
	case <-ctx.Done():
	case err := <-errs:
		return err
	}
	wg.Wait()
	return nil
}

// prepareDataDir makes the data directory, and a tmpfs at it unless one is there.
func prepareDataDir(o *Options, mounter mounts.Mounter) error {
	if err := os.MkdirAll(o.DataDir, 0o700); err != nil {
		return fmt.Errorf("cannot make --data-dir %s: %w", o.DataDir, err)
	}
	if !o.DataDirTmpfs {
		return nil
	}
	mounted, err := mounter.IsMountPoint(o.DataDir)
	if err != nil {
		return fmt.Errorf("cannot tell whether --data-dir %s is mounted: %w", o.DataDir, err)
	}
	if mounted {
		return nil // the tmpfs a previous agent mounted: its volumes are in it
	}
	size := resource.MustParse(o.DataDirSize) // Validate parsed it
	if err := mounter.Tmpfs(o.DataDir, size.Value()); err != nil {
		return fmt.Errorf("cannot mount a tmpfs at --data-dir %s (the agent needs CAP_SYS_ADMIN, and a hostPath with Bidirectional mount propagation so a restarted agent finds it): %w", o.DataDir, err)
	}
	klog.InfoS("Mounted a tmpfs for the volumes' files", "dir", o.DataDir, "size", o.DataDirSize)
	return nil
}

// newReportPublisher observes what the node's pods hold and keeps the node's report.
func newReportPublisher(ctx context.Context, o *Options, podsClient rest.Interface, dyn dynamic.Interface, pods *NodePods, objects *reader.TrustObjects, m *Metrics, events *podevents.Broadcaster) (*ReportPublisher, error) {
	owner, err := NodeOwner(ctx, podsClient, o.NodeName)
	if err != nil {
		return nil, err
	}
	observer := &holdings.Scanner{PodsDir: o.PodsDir}
	recorder := func(ref podevents.PodRef) podevents.OnceRecorder { return events.For(ref) }
	expiry := &AnchorExpiry{Days: o.ExpiryWarningDays, Events: recorder, Clock: clock.RealClock{}, Gauge: m.anchorExpiry}
	var expiryChecked time.Time
	return &ReportPublisher{
		Client: dyn.Resource(v1alpha1.NodeTrustReportResource), Node: o.NodeName, Owner: owner,
		Scan: func() ([]holdings.Pod, bool) {
			if objs, changed := objects.Current(); changed {
				observer.SetObjects(objs)
			}
			held, changed := observer.Scan(pods.List())
			files := 0
			for _, p := range held {
				files += len(p.Files)
			}
			m.observed.Set(float64(files))
			// Anchors come closer to expiry without any file changing: looked at
			// after each change, and every minute.
			if changed || time.Since(expiryChecked) >= time.Minute {
				expiry.Observe(held, observer.Anchor)
				expiryChecked = time.Now()
			}
			return held, changed
		},
		ScanEvery: o.ObserveEvery, MinInterval: o.ReportInterval, Heartbeat: o.ReportHeartbeat, Wrote: m.reportWritten,
	}, nil
}
