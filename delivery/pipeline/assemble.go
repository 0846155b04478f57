package pipeline

import (
	"crypto/sha256"
	"errors"
	"fmt"

	certificatesv1 "k8s.io/api/certificates/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"

	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"github.com/trustsync/trustsync/delivery/certificate"
	"github.com/trustsync/trustsync/delivery/contract"
	"github.com/trustsync/trustsync/delivery/metrics"
	"github.com/trustsync/trustsync/delivery/observe"
	"github.com/trustsync/trustsync/delivery/podevents"
	"github.com/trustsync/trustsync/delivery/render"
	"github.com/trustsync/trustsync/delivery/watch"
	"github.com/trustsync/trustsync/delivery/write"
)

// Parts are what one volume's pipeline is made of, given the same way by the sidecar
// (its pod's one volume) and the agent (each volume of its node).
type Parts struct {
	Spec    contract.Spec
	Plan    *render.Plan
	Sources Sources
	Writer  write.Writer
	Events  interface {
		podevents.Recorder
		podevents.OnceRecorder
	}
	// Metrics, when set, counts the syncs (first of the observers) and the
	// certificate's and reloads' work; Observer, when set, is told each sync after it
	// (the agent's own metrics).
	Metrics  *metrics.Metrics
	Observer observe.Observer
	// ReloadTargets tell the app of a change (Spec.Reload says whether to).
	ReloadTargets []observe.Target
	// CSRs, Identity, PodName and PodUID serve the workload certificate, when the
	// Spec asks for one.
	CSRs            rest.Interface
	Identity        spiffeid.ID
	PodName, PodUID string
	Clock           clock.Clock
	Settled         func()
	// Admit, when set, refuses a bundle the pod may not trust, saying why: it is left
	// out of the files, and a Warning Event (ReasonBundleNotGranted) on the pod names
	// it, once.
	Admit func(*certificatesv1.ClusterTrustBundle) error
	// Recheck asks for a sync when what Admit decides may have changed.
	Recheck <-chan struct{}
}

// ReasonBundleNotGranted is the reason of the Warning Event on a pod whose volume
// leaves a bundle out because its namespace is not granted it.
const ReasonBundleNotGranted = "TrustBundleNotGranted"

// Assembled is a pipeline and the parts that run beside it: the certificate
// manager and the reloader, each nil when the Spec asks for none.
type Assembled struct {
	*Pipeline
	Cert   *certificate.Manager
	Reload *observe.Reloader
}

// Assemble makes the pipeline of p: the files on disk adopted, the observers in their
// order (metrics, expiry warnings, the reload, then the report, so that "Wrote trust
// files" follows every other observer's decision about the same write in the log).
func Assemble(p Parts) (*Assembled, error) {
	onDisk, err := p.Writer.Read()
	if err != nil {
		return nil, err
	}
	if p.Clock == nil {
		p.Clock = clock.RealClock{}
	}
	a := &Assembled{}
	var observers []observe.Observer
	if p.Metrics != nil {
		observers = append(observers, observe.Metrics(p.Metrics))
	}
	if w := observe.NewExpiryWarner(p.Spec.ExpiryWarningDays, p.Events, p.Clock); w != nil {
		observers = append(observers, w)
	}
	if p.Spec.Reload != nil && len(p.ReloadTargets) > 0 {
		a.Reload = observe.NewReloader(p.ReloadTargets, p.Events, p.Clock, p.Metrics, p.Spec.Reload.Settle)
		observers = append(observers, a.Reload)
	}
	if p.Observer != nil {
		observers = append(observers, p.Observer)
	}
	observers = append(observers, observe.NewReporter(p.Events, podevents.Throttle{Clock: p.Clock}))
	var certFiles map[string]render.File
	if c := p.Spec.Certificate; c != nil {
		a.Cert = certificate.New(certificate.Options{
			Signer: c.Signer, ExpirationSeconds: c.ExpirationSeconds, DNSNames: c.DNSNames, KeyType: c.KeyType, CredentialBundle: c.CredentialBundle,
			Identity: p.Identity, PodName: p.PodName, PodUID: p.PodUID, StateDir: c.StateDir,
		}, p.CSRs, p.Events, p.Metrics)
		a.Cert.Adopt(onDisk)
		certFiles = a.Cert.Files()
	}
	a.Pipeline = New(Config{Plan: p.Plan, Sources: p.Sources, Writer: p.Writer, OnDisk: onDisk, Certificate: certFiles,
		Observers: observers, Clock: p.Clock, Settled: p.Settled, Admit: admit(p.Admit, p.Events), Recheck: p.Recheck})
	return a, nil
}

// admit says a refusal in an Event, once per bundle; what it cannot decide is
// passed on, unsaid.
func admit(check func(*certificatesv1.ClusterTrustBundle) error, events podevents.OnceRecorder) func(*certificatesv1.ClusterTrustBundle) error {
	if check == nil {
		return nil
	}
	return func(b *certificatesv1.ClusterTrustBundle) error {
		err := check(b)
		if err != nil && !errors.Is(err, watch.ErrUndecided) {
			// The key is part of the Event's name: a bundle's name may hold ':'.
			events.WarningOnce(fmt.Sprintf("not-granted-%x", sha256.Sum256([]byte(b.Name)))[:32], ReasonBundleNotGranted, fmt.Sprintf("Left bundle %s out of the trust files, which are written without it: %v", b.Name, err))
		}
		return err
	}
}
