package observe

import (
	"crypto/x509"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	tsbundle "github.com/trustsync/trustsync/bundle"
	"github.com/trustsync/trustsync/delivery/podevents"
)

const (
	reasonAnchorExpiring = "TrustAnchorExpiring"
	// expiryWarningEvery: an anchor about to expire is worth one Event a day on each
	// pod that trusts it, not one per sync.
	expiryWarningEvery = 24 * time.Hour
	// MaxExpiryWarnings bounds the anchors one pod is warned of per
	// expiryWarningEvery; the rest are counted in one more Event. A pod's files may
	// hold thousands of anchors (the node's agent reads any pod's), and one Event
	// each would be thousands of API writes, and as many goroutines waiting on them.
	MaxExpiryWarnings = 10
)

// ExpiryWarner records a Warning Event on the pod for each anchor it is given that
// expires within window, at most once per expiryWarningEvery per anchor: the process
// remembers what it warned of, and each Event is keyed by the anchor and the day, so
// a restarted sidecar does not repeat one the pod still shows.
type ExpiryWarner struct {
	window time.Duration
	events podevents.OnceRecorder
	clock  clock.PassiveClock
	warned map[[32]byte]time.Time
	// moreSaid is the day the anchors beyond MaxExpiryWarnings were last counted.
	moreSaid string
}

// NewExpiryWarner warns days ahead; nil (no warner) for 0 days.
func NewExpiryWarner(days int, events podevents.OnceRecorder, clk clock.PassiveClock) *ExpiryWarner {
	if days <= 0 {
		return nil
	}
	return &ExpiryWarner{window: time.Duration(days) * 24 * time.Hour, events: events, clock: clk, warned: map[[32]byte]time.Time{}}
}

// Wrote looks at the anchors a sync wrote.
func (w *ExpiryWarner) Wrote(s Written) {
	if !s.Reached() {
		return
	}
	files := map[string][]*tsbundle.Anchor{}
	for p, path := range s.Fresh() {
		files[p] = path.Anchors
	}
	w.Check(files)
}

// Check looks at anchors, by the path of the file that holds them: the anchors just
// written, or what an observer found in a pod's files.
func (w *ExpiryWarner) Check(files map[string][]*tsbundle.Anchor) {
	now := w.clock.Now()
	for sum, at := range w.warned {
		if now.Sub(at) >= expiryWarningEvery {
			delete(w.warned, sum)
		}
	}
	// One Event per anchor, naming every file it is in.
	var soon []*expiring
	bySum := map[[32]byte]*expiring{}
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	for _, p := range paths {
		for _, a := range files[p] {
			if a.NotAfter.IsZero() || a.NotAfter.Sub(now) > w.window {
				continue
			}
			if _, warned := w.warned[a.Sum]; warned {
				continue
			}
			e, ok := bySum[a.Sum]
			if !ok {
				e = &expiring{anchor: a}
				bySum[a.Sum] = e
				soon = append(soon, e)
			}
			e.paths = append(e.paths, p)
		}
	}
	slices.SortFunc(soon, func(a, b *expiring) int { return a.anchor.NotAfter.Compare(b.anchor.NotAfter) })
	day := now.UTC().Format("20060102")
	budget := max(MaxExpiryWarnings-len(w.warned), 0)
	for _, e := range soon[:min(budget, len(soon))] {
		msg := expiryMessage(e.anchor, e.paths, now)
		klog.InfoS("Trust anchor expires soon", "message", msg)
		w.events.WarningOnce(fmt.Sprintf("expiry-%x-%s", e.anchor.Sum[:8], day), reasonAnchorExpiring, msg)
		w.warned[e.anchor.Sum] = now
	}
	if more := len(soon) - budget; more > 0 && w.moreSaid != day {
		w.moreSaid = day
		// Said once a day, however many there are.
		w.events.WarningOnce("expiry-more-"+day, reasonAnchorExpiring, fmt.Sprintf(
			"%d more trust anchors in %s expire within %s, beyond the %d warned of today one by one (kubectl trustsync status names the files)",
			more, strings.Join(sortedPaths(soon[budget:]), ", "), w.window, MaxExpiryWarnings))
	}
}

// expiring is an anchor about to expire and the files it is in.
type expiring struct {
	anchor *tsbundle.Anchor
	paths  []string
}

// sortedPaths is every file the anchors are in, once, sorted, at most ten.
func sortedPaths(items []*expiring) []string {
	var out []string
	for _, it := range items {
		for _, p := range it.paths {
			if !slices.Contains(out, p) {
				out = append(out, p)
			}
		}
	}
	slices.Sort(out)
	return out[:min(len(out), 10)]
}

func expiryMessage(a *tsbundle.Anchor, paths []string, now time.Time) string {
	subject := "(unparsable)"
	if c, err := x509.ParseCertificate(a.DER); err == nil {
		subject = c.Subject.String()
	} else if len(a.DER) == 0 && a.Name != "" {
		subject = "CN=" + a.Name // an anchor kept without its certificate
	}
	what := fmt.Sprintf("Trust anchor %q (SHA-256 %x) in %s", subject, a.Sum[:8], strings.Join(paths, ", "))
	at := a.NotAfter.UTC().Format(time.RFC3339)
	if !a.NotAfter.After(now) {
		return fmt.Sprintf("%s expired at %s; remove it from its source, and make sure its successor is published", what, at)
	}
	return fmt.Sprintf("%s expires at %s, in %s; publish its successor and remove it before then", what, at, roughly(a.NotAfter.Sub(now)))
}

// roughly says a duration the way a person would: days, or hours under two days.
func roughly(d time.Duration) string {
	if d >= 48*time.Hour {
		return fmt.Sprintf("%d days", int(d/(24*time.Hour)))
	}
	if d >= 2*time.Hour {
		return fmt.Sprintf("%d hours", int(d/time.Hour))
	}
	return fmt.Sprintf("%d minutes", int(d/time.Minute))
}
