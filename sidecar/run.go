// Package sidecar is the trust-sync sidecar: one pod's pipeline (package pipeline)
// over its own watches, kept running until the pod stops (Run), run once to completion
// (Init, the legacy mode's init container), or checked (Probe, the startup probe).
package sidecar

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"k8s.io/klog/v2"

	"github.com/trustsync/trustsync/delivery/metrics"
)

// Run keeps the trust files current until ctx is done (SIGTERM). While the API server
// is unreachable the watches retry, the files keep their content, and the first change
// seen after recovery is written.
func Run(ctx context.Context, o *Options) error {
	if err := o.Validate(true); err != nil {
		return err
	}
	var m *metrics.Metrics
	if o.MetricsAddress != "" {
		m = metrics.New(time.Now)
		if err := metrics.Serve(ctx, o.MetricsAddress, m); err != nil {
			return err
		}
	}
	p, err := setup(ctx, o, m)
	if err != nil {
		return err
	}
	defer p.close()
	if !p.sources.WaitSynced(ctx) {
		return nil // shutting down before the first sync
	}
	klog.InfoS("Watching trust sources", "dir", o.Spec.Dir, "paths", len(p.plan.Paths()), "watches", p.registry.Watches(), "certificate", p.cert != nil)
	if p.bundles {
		go p.registry.Run(ctx, o.APIDiscoveryInterval)
	}
	if p.cert != nil {
		go p.cert.Run(ctx, p.pipeline.Offers())
	}
	if p.reload != nil {
		go p.reload.Run(ctx)
	}
	p.pipeline.Run(ctx)
	return nil
}

// Init writes every file once and exits: the legacy mode's init container. A required
// file that cannot be written fails it with a one-line reason, also in the termination
// log, so `kubectl describe pod` says why the pod is not starting.
func Init(ctx context.Context, o *Options) error {
	if err := o.Validate(true); err != nil {
		return terminate(o, err)
	}
	ctx, cancel := context.WithTimeout(ctx, time.Duration(o.InitTimeoutSecs)*time.Second)
	defer cancel()
	p, err := setup(ctx, o, nil)
	if err != nil {
		return terminate(o, fmt.Errorf("cannot reach the API server: %w", err))
	}
	defer p.close()
	if err := p.pipeline.FirstSync(ctx, p.sources, p.cert, fmt.Sprintf("%ds (--init-timeout-seconds)", o.InitTimeoutSecs)); err != nil {
		return terminate(o, err)
	}
	return nil
}

// terminate writes err to the termination log and returns it.
func terminate(o *Options, err error) error {
	if o.TerminationLog != "" {
		if werr := os.WriteFile(o.TerminationLog, []byte(err.Error()+"\n"), 0o644); werr != nil {
			klog.ErrorS(werr, "Cannot write the termination log", "path", o.TerminationLog)
		}
	}
	return err
}

// Probe succeeds only when every required file exists and is not empty: the startup
// probe that holds app containers back until their trust files are in place.
func Probe(o *Options) error {
	if err := o.Validate(false); err != nil {
		return err
	}
	plan, err := o.plan()
	if err != nil {
		return err
	}
	for _, p := range plan.Required() {
		info, err := os.Stat(filepath.Join(o.Spec.Dir, p))
		switch {
		case err != nil:
			return fmt.Errorf("%s is not written yet: %w", p, err)
		case info.Size() == 0:
			return fmt.Errorf("%s is empty", p)
		}
	}
	return nil
}
