package observe

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/trustsync/trustsync/delivery/contract"
	"github.com/trustsync/trustsync/delivery/metrics"
	"github.com/trustsync/trustsync/delivery/podevents"
)

// How reloads are paced. The first change after a quiet spell (settle without a
// reload) is told at once: the file is whole when the sync that wrote it reports, so
// the app gains nothing by waiting. A bundle edit often comes as several watch events,
// and a CA rotation as an add and later a remove: changes within settle of a reload are
// told together once none came for settle, and a stream of changes that never settles
// still within reloadMaxDelay of its first, so the app is never left on an old file
// and is told a few times per burst, not once per change. A failed reload is retried
// from reloadRetryMin, doubling to reloadRetryMax.
const (
	reloadMaxDelay = contract.ReloadMaxDelay
	reloadRetryMin = time.Second
	reloadRetryMax = 2 * time.Minute
)

const (
	reasonReloaded     = "TrustReloaded"
	reasonReloadFailed = "TrustReloadFailed"
)

// Target tells the app once that what it trusts or presents changed.
type Target interface {
	reload(ctx context.Context) (string, error)
	// kind is the target's label in metrics: url or signal.
	kind() string
	String() string
}

// Reloader tells the app when the pod's trust or certificate changed: when the set of
// anchors of a file, or the workload certificate, is not what it was, never for new
// bytes alone (a truststore re-encoded, a bundle reordered). The state the app
// started with is the baseline: the first complete state written, or what a restarted
// sidecar found on disk; reaching it triggers nothing.
type Reloader struct {
	targets []Target
	events  podevents.Recorder
	clock   clock.Clock
	metrics *metrics.Metrics
	settle  time.Duration

	mu       sync.Mutex
	baseline string
	known    bool
	// first and last are when the changes not yet delivered began and when the latest
	// came; zero first means none is pending. told is when the last delivery began.
	first, last, told time.Time
	kick              chan struct{}
}

// NewReloader reloads through targets, paced by settle (contract.Reload.Settle),
// recording Events and, when m is not nil, metrics.
func NewReloader(targets []Target, events podevents.Recorder, clk clock.Clock, m *metrics.Metrics, settle time.Duration) *Reloader {
	return &Reloader{targets: targets, events: events, clock: clk, metrics: m, settle: settle, kick: make(chan struct{}, 1)}
}

// Wrote takes the state a sync wrote, or the one a previous run left on disk.
func (r *Reloader) Wrote(w Written) {
	if w.FromDisk || w.Reached() {
		r.observe(w.Now.State())
	}
}

// observe takes the state just written (or found on disk); complete says every file
// the app waits for is in it. A change of a known state asks for a reload.
func (r *Reloader) observe(state string, complete bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case !r.known:
		// Before the pod's files are complete the app has not started (the startup
		// probe holds it), so there is nothing to reload yet.
		if complete {
			r.baseline, r.known = state, true
			klog.InfoS("The app starts with the files as they are; it is told of changes from now on")
		}
		return
	case state == r.baseline:
		return
	}
	klog.InfoS("What the app trusts or presents changed; it will be told", "settle", r.settle)
	r.baseline = state
	r.last = r.clock.Now()
	if r.first.IsZero() {
		r.first = r.last
	}
	select {
	case r.kick <- struct{}{}:
	default: // the loop is already told
	}
}

// due is when the pending changes should be delivered: at once when they began after
// settle without a reload; else once none came for settle, or reloadMaxDelay after
// the first. ok is false when none is pending.
func (r *Reloader) due() (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.first.IsZero() {
		return time.Time{}, false
	}
	if r.told.IsZero() || r.first.Sub(r.told) >= r.settle {
		return r.first, true
	}
	due := r.last.Add(r.settle)
	if limit := r.first.Add(reloadMaxDelay); limit.Before(due) {
		due = limit
	}
	return due, true
}

// take marks the pending changes as being delivered, now; changes observed from now
// on make a new round.
func (r *Reloader) take() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.first, r.last, r.told = time.Time{}, time.Time{}, r.clock.Now()
}

// Run delivers reloads until ctx is done.
func (r *Reloader) Run(ctx context.Context) {
	for {
		if !r.wait(ctx, r.kick) {
			return
		}
		if due, pending := r.due(); pending && !r.clock.Now().Before(due) {
			r.take()
			r.deliver(ctx)
		}
	}
}

// wait returns when there is something to do: a change observed (on kick) or the
// pending changes due. It returns false when ctx is done.
func (r *Reloader) wait(ctx context.Context, kick <-chan struct{}) bool {
	var timer <-chan time.Time
	if due, pending := r.due(); pending {
		t := r.clock.NewTimer(due.Sub(r.clock.Now()))
		defer t.Stop()
		timer = t.C()
	}
	select {
	case <-ctx.Done():
		return false
	case <-kick:
	case <-timer:
	}
	return true
}

// deliver reloads through every target, retrying the ones that fail with backoff
// until each succeeded or a newer change is due (which starts a new round for all).
func (r *Reloader) deliver(ctx context.Context) {
	pending := r.targets
	failing := podevents.Throttle{Clock: r.clock}
	for attempt := 0; ; attempt++ {
		var failed []Target
		var done, errs []string
		for _, t := range pending {
			what, err := t.reload(ctx)
			r.metrics.Reload(t.kind(), err)
			if err != nil {
				failed = append(failed, t)
				errs = append(errs, fmt.Sprintf("%s: %v", t, err))
				continue
			}
			done = append(done, what)
		}
		if len(done) > 0 {
			klog.InfoS("Told the app that its trust or certificate changed", "reloads", done)
			r.events.Normal(reasonReloaded, "Trust or certificate changed; reloaded the app: "+strings.Join(done, "; "))
		}
		if len(failed) == 0 {
			return
		}
		err := errors.New(strings.Join(errs, "; "))
		delay := min(reloadRetryMin<<min(attempt, 10), reloadRetryMax)
		klog.ErrorS(err, "Cannot reload the app; retrying", "retryIn", delay)
		if msg := err.Error(); failing.Due(msg) {
			r.events.Warning(reasonReloadFailed, fmt.Sprintf("Cannot reload the app after its trust or certificate changed (retrying in %s): %s", delay, msg))
		}
		pending = failed
		retry := r.clock.NewTimer(delay)
		select {
		case <-ctx.Done():
			retry.Stop()
			return
		case <-r.kick:
			// A newer change: the run loop reloads everything once it settles.
			retry.Stop()
			r.requeue()
			return
		case <-retry.C():
		}
	}
}

// requeue hands the kick deliver consumed back to the run loop.
func (r *Reloader) requeue() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// urlTarget POSTs to a URL on the pod's loopback.
type urlTarget struct {
	url    string
	client *http.Client
	// podIP, when set, is where the request goes instead of the loopback: the node
	// agent is not in the pod's network namespace, so it calls the pod's own address
	// (asked for each request: never another pod's, never one stale from before a
	// restart).
	podIP func() (string, error)
}

// NewURLTarget POSTs to url.
func NewURLTarget(url string) Target { return newURLTarget(url) }

// NewPodURLTarget POSTs to url's port and path at the pod's address, which podIP
// gives: the node agent's way to reach an app that asked for a loopback URL.
func NewPodURLTarget(url string, podIP func() (string, error)) Target {
	t := newURLTarget(url)
	t.podIP = podIP
	return t
}

func newURLTarget(url string) *urlTarget {
	return &urlTarget{url: url, client: &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			// Never through a proxy: the request is for this pod.
			Proxy: nil,
			// The request never leaves the pod's network namespace and carries
			// nothing secret, and an app's certificate rarely names 127.0.0.1, so an
			// https URL is not verified.
			TLSClientConfig:   &tls.Config{InsecureSkipVerify: true},
			DisableKeepAlives: true,
		},
		// A redirect could point off the pod; the URL must answer itself.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

func (u *urlTarget) String() string {
	if u.podIP != nil {
		return "POST " + u.url + " at the pod's address"
	}
	return "POST " + u.url
}
func (u *urlTarget) kind() string { return "url" }

// target is the URL to call now.
func (u *urlTarget) target() (string, error) {
	if u.podIP == nil {
		return u.url, nil
	}
	ip, err := u.podIP()
	if err != nil {
		return "", err
	}
	parsed, err := url.Parse(u.url)
	if err != nil {
		return "", err
	}
	if port := parsed.Port(); port != "" {
		parsed.Host = net.JoinHostPort(ip, port)
	} else {
		parsed.Host = net.JoinHostPort(ip, map[string]string{"http": "80", "https": "443"}[parsed.Scheme])
	}
	return parsed.String(), nil
}

func (u *urlTarget) reload(ctx context.Context) (string, error) {
	target, err := u.target()
	if err != nil {
		return "", err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, nil)
	if err != nil {
		return "", err
	}
	agent := "trustsync-sidecar"
	if u.podIP != nil {
		agent = "trustsync-agent"
	}
	req.Header.Set("User-Agent", agent)
	resp, err := u.client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		msg := fmt.Sprintf("answered %s", resp.Status)
		if b := strings.TrimSpace(string(body)); b != "" {
			msg += ": " + b
		}
		return "", errors.New(msg)
	}
	return fmt.Sprintf("POST %s answered %s", target, resp.Status), nil
}
