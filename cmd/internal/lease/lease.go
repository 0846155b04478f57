// Package lease is how trustsync's controllers take turns: client-go's leader election
// over a coordination.k8s.io Lease, set up one way for the webhook and the signer. It
// lives with the mains, as kube-controller-manager's does, so that the packages that do
// the work take a Campaign and never link the election machinery themselves (nor the
// sidecar, which needs none).
package lease

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"

	"github.com/trustsync/trustsync/cmd/internal/cli"
)

// Flags are the leader-election flags, named and defaulted as Kubernetes components
// name and default them.
type Flags struct {
	Enabled       bool
	LeaseDuration time.Duration
	RenewDeadline time.Duration
	RetryPeriod   time.Duration
}

// NewFlags returns kube-controller-manager's defaults, with election on.
func NewFlags() *Flags {
	return &Flags{Enabled: true, LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second}
}

// AddFlags registers the flags; enabledUsage says what the Lease guards in this binary.
func (f *Flags) AddFlags(fs *pflag.FlagSet, enabledUsage string) {
	fs.BoolVar(&f.Enabled, "leader-elect", f.Enabled, enabledUsage)
	fs.DurationVar(&f.LeaseDuration, "leader-elect-lease-duration", f.LeaseDuration, "How long a leader's Lease lasts without renewal.")
	fs.DurationVar(&f.RenewDeadline, "leader-elect-renew-deadline", f.RenewDeadline, "How long the leader tries to renew before giving up leadership.")
	fs.DurationVar(&f.RetryPeriod, "leader-elect-retry-period", f.RetryPeriod, "How often candidates try to take the Lease.")
}

// Campaign stands for the Lease namespace/name until ctx is done or, having held it,
// loses it. While it holds the Lease, lead runs with a context that ends when the Lease
// is lost. It returns nil when ctx ended and an error naming the Lease when it was
// lost. On ctx's end it releases the Lease, so the next leader (a new rollout's, say)
// takes it at once instead of waiting out a Lease that names a dead holder.
type Campaign func(ctx context.Context, cfg *rest.Config, namespace, name string, lead func(context.Context)) error

// Campaign returns the campaign these flags describe, or nil when election is off (every
// replica acts). Timings that cannot work are refused here, at start-up.
func (f *Flags) Campaign() (Campaign, error) {
	if !f.Enabled {
		return nil, nil
	}
	if err := f.validate(); err != nil {
		return nil, err
	}
	return f.campaign, nil
}

func (f *Flags) validate() error {
	// The same rules client-go enforces when an elector is built, reported with the
	// flags' names.
	switch {
	case f.LeaseDuration <= f.RenewDeadline:
		return fmt.Errorf("--leader-elect-lease-duration (%s) must be longer than --leader-elect-renew-deadline (%s)", f.LeaseDuration, f.RenewDeadline)
	case f.RenewDeadline <= time.Duration(leaderelection.JitterFactor*float64(f.RetryPeriod)):
		return fmt.Errorf("--leader-elect-renew-deadline (%s) must be longer than %.1f times --leader-elect-retry-period (%s)", f.RenewDeadline, leaderelection.JitterFactor, f.RetryPeriod)
	case f.RetryPeriod < time.Millisecond:
		return fmt.Errorf("--leader-elect-retry-period (%s) must be at least 1ms", f.RetryPeriod)
	}
	return nil
}

func (f *Flags) campaign(ctx context.Context, cfg *rest.Config, namespace, name string, lead func(context.Context)) error {
	// The Lease gets a client of its own, with its own rate limit, as
	// kube-controller-manager's does: a flood of work must never starve renewals and
	// cost the leadership, nor renewals eat the work's budget.
	client, err := kubernetes.NewForConfig(rest.CopyConfig(cfg))
	if err != nil {
		return err
	}
	hostname, _ := os.Hostname()
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: namespace, Name: name},
		Client:     client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: hostname + "_" + uuid.NewString()},
	}
	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: lock, ReleaseOnCancel: true, Name: name,
		LeaseDuration: f.LeaseDuration, RenewDeadline: f.RenewDeadline, RetryPeriod: f.RetryPeriod,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				klog.InfoS("Took the Lease", "lease", klog.KRef(namespace, name))
				lead(ctx)
			},
			OnStoppedLeading: func() {},
			OnNewLeader: func(identity string) {
				klog.InfoS("Leader is", "lease", klog.KRef(namespace, name), "identity", identity, "self", identity == lock.Identity())
			},
		},
	})
	if err != nil {
		return fmt.Errorf("invalid leader election settings: %w", err)
	}
	elector.Run(ctx)
	// Run returns before ctx ends only when a Lease it held was lost.
	if ctx.Err() != nil {
		return nil
	}
	return fmt.Errorf("lost the Lease %s/%s", namespace, name)
}

// Run is the main of a binary whose replicas take turns over a Lease (the webhook's
// self-managed TLS, the signer, the controller): its flags, added by addFlags, and the
// election's, described by leaderElectUsage, parsed as cli parses them; the campaign
// they describe (nil with --leader-elect=false), timings that cannot work refused
// before anything starts; then run until SIGTERM, and the exit cli makes of its error.
func Run(name, about, leaderElectUsage string, addFlags func(*pflag.FlagSet), run func(ctx context.Context, fs *pflag.FlagSet, campaign Campaign) error) {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	addFlags(fs)
	election := NewFlags()
	election.AddFlags(fs, leaderElectUsage)
	cli.Parse(fs, about, os.Args[1:])
	campaign, err := election.Campaign()
	if err != nil {
		cli.Exit(err)
	}
	cli.Exit(run(cli.SignalContext(), fs, campaign))
}
