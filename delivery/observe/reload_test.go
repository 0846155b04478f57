package observe

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/trustsync/trustsync/delivery/contract"
	"github.com/trustsync/trustsync/delivery/podevents/podeventstest"
	"github.com/trustsync/trustsync/test/poll"
)

// countingTarget records reloads and fails while err is set.
type countingTarget struct {
	mu     sync.Mutex
	count  int // successful reloads
	called int // every call
	err    error
	done   chan struct{}
}

func newCountingTarget() *countingTarget { return &countingTarget{done: make(chan struct{}, 100)} }

func (c *countingTarget) reload(context.Context) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	defer func() { c.done <- struct{}{} }()
	c.called++
	if c.err != nil {
		return "", c.err
	}
	c.count++
	return "counted", nil
}
func (c *countingTarget) String() string { return "counter" }
func (c *countingTarget) kind() string   { return "url" }
func (c *countingTarget) calls() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.called
}
func (c *countingTarget) reloads() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.count
}
func (c *countingTarget) failWith(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.err = err
}

// startReloader runs a reloader on a fake clock; step advances the clock once the
// reloader waits on it.
func startReloader(t *testing.T) (r *Reloader, target *countingTarget, events *podeventstest.Recorder, step func(time.Duration), waiting func() bool) {
	return startReloaderSettling(t, reloadSettle)
}

// reloadSettle is the default pacing the tests run with.
const reloadSettle = contract.DefaultReloadSettle

func startReloaderSettling(t *testing.T, settle time.Duration) (r *Reloader, target *countingTarget, events *podeventstest.Recorder, step func(time.Duration), waiting func() bool) {
	t.Helper()
	clk := clocktesting.NewFakeClock(time.Now())
	target = newCountingTarget()
	events = &podeventstest.Recorder{}
	r = NewReloader([]Target{target}, events, clk, nil, settle)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	step = func(d time.Duration) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for !clk.HasWaiters() {
			if time.Now().After(deadline) {
				t.Fatal("the reloader never waited on its clock")
			}
			time.Sleep(time.Millisecond)
		}
		clk.Step(d)
	}
	// The reloader waits on its clock only between steps of its work: once it does
	// again after a step, whatever that step set off has happened.
	return r, target, events, step, clk.HasWaiters
}

// waitCalls waits for the target to be called n more times.
func waitCalls(t *testing.T, c *countingTarget, n int) {
	t.Helper()
	for range n {
		select {
		case <-c.done:
		case <-time.After(5 * time.Second):
			t.Fatal("the reloader never called the target")
		}
	}
}

func TestReloader_TheFirstCompleteStateIsTheBaseline(t *testing.T) {
	r := NewReloader(nil, &podeventstest.Recorder{}, clocktesting.NewFakeClock(time.Now()), nil, reloadSettle)
	for _, tc := range []struct {
		state    string
		complete bool
		kick     bool
	}{
		{"trust=a;", false, false},       // the trust file, the certificate not yet
		{"trust=a;crt=1", true, false},   // complete: the state the app starts with
		{"trust=a;crt=1", true, false},   // the same again (a resync, a re-encoded store)
		{"trust=a,b;crt=1", true, true},  // a new anchor
		{"trust=a,b;crt=2", true, true},  // a new certificate
		{"trust=a,b;crt=2", true, false}, // nothing new
	} {
		r.observe(tc.state, tc.complete)
		select {
		case <-r.kick:
			if !tc.kick {
				t.Errorf("state %q asked for a reload", tc.state)
			}
		default:
			if tc.kick {
				t.Errorf("state %q asked for no reload", tc.state)
			}
		}
	}
}

// The first change after a quiet spell is told at once (the file is whole when its
// sync reports); the changes that follow within the settle time are told together
// once they stop, so the app ends on the last file, told twice for a burst of five.
func TestReloader_TheFirstChangeIsToldAtOnceAndTheRestOfABurstOnceItSettles(t *testing.T) {
	r, target, _, step, waiting := startReloader(t)
	r.observe("s0", true)
	r.observe("s1", true)
	waitCalls(t, target, 1) // no step of the clock: at once
	for i := 2; i <= 5; i++ {
		r.observe("s"+strconv.Itoa(i), true)
		step(reloadSettle / 2) // each change within the settle time of the last
	}
	// Once it waits on its clock again, the reloader has taken in the last step: a
	// reload it were to make then would have been made.
	poll.True(t, 10*time.Second, "the reloader to take in the last step", func() bool { return waiting() || target.calls() > 1 })
	if got := target.reloads(); got != 1 {
		t.Fatalf("%d reloads before the rest of the burst settled, want the first alone", got)
	}
	step(reloadSettle / 2)
	waitCalls(t, target, 1)
	// Quiet for the settle time since that reload (nothing pending, so the reloader
	// waits on no timer): the next change is told at once.
	r.clock.(*clocktesting.FakeClock).Step(reloadSettle)
	r.observe("s6", true)
	waitCalls(t, target, 1)
	if got := target.reloads(); got != 3 {
		t.Fatalf("%d reloads, want 3: the burst's first, its rest, and the change after a quiet spell", got)
	}
}

// With a settle time of 0 every change is told at once.
func TestReloader_NoSettleTimeTellsEveryChange(t *testing.T) {
	r, target, _, _, _ := startReloaderSettling(t, 0)
	r.observe("s0", true)
	for i := 1; i <= 3; i++ {
		r.observe("s"+strconv.Itoa(i), true)
		waitCalls(t, target, 1)
	}
	if got := target.reloads(); got != 3 {
		t.Fatalf("%d reloads for three changes, want 3", got)
	}
}

func TestReloader_ChangesThatNeverSettleStillReloadWithinTheMaximumDelay(t *testing.T) {
	r, target, _, step, waiting := startReloader(t)
	r.observe("s0", true)
	r.observe("s1", true)
	waitCalls(t, target, 1) // the first, at once
	elapsed := time.Duration(0)
	for i := 2; target.reloads() == 1; i++ {
		if elapsed > reloadMaxDelay {
			t.Fatalf("no second reload %s after the changes began coming without pause", elapsed)
		}
		r.observe("s"+strconv.Itoa(i), true)
		step(reloadSettle - time.Millisecond)
		elapsed += reloadSettle - time.Millisecond
		// The step was taken in: the reloader waits on its clock again, or it
		// reloaded (after which it waits for the next change alone).
		poll.True(t, 10*time.Second, "the reloader to take in the step", func() bool { return waiting() || target.calls() > 1 })
	}
	if elapsed < reloadMaxDelay {
		t.Errorf("reloaded again %s after the changes began, before the maximum delay %s, though they kept coming", elapsed, reloadMaxDelay)
	}
}

func TestReloader_AFailedReloadIsRetriedWithBackoffAndReported(t *testing.T) {
	r, target, events, step, waiting := startReloader(t)
	target.failWith(errors.New("connection refused"))
	r.observe("s0", true)
	r.observe("s1", true)
	waitCalls(t, target, 1) // the first attempt, at once, fails
	for _, d := range []time.Duration{reloadRetryMin, 2 * reloadRetryMin} {
		calls := target.calls()
		step(d / 2)
		// A retry fired too early would call the target before arming its next
		// timer; the reloader waiting on its clock again means it did not, or did.
		poll.True(t, 10*time.Second, "the reloader to take in half the backoff", waiting)
		if target.calls() != calls {
			t.Fatalf("retried before the backoff of %s passed", d)
		}
		step(d / 2)
		waitCalls(t, target, 1)
	}
	target.failWith(nil)
	step(4 * reloadRetryMin)
	waitCalls(t, target, 1)
	if got := target.reloads(); got != 1 {
		t.Fatalf("%d successful reloads, want 1", got)
	}
	// The Event follows the call.
	got := events.Events()
	for deadline := time.Now().Add(5 * time.Second); !strings.HasPrefix(got[len(got)-1], "Normal ") && time.Now().Before(deadline); got = events.Events() {
		time.Sleep(time.Millisecond)
	}
	warnings := 0
	for _, e := range got {
		if strings.HasPrefix(e, "Warning "+reasonReloadFailed+": ") {
			warnings++
			if !strings.Contains(e, "counter: connection refused") {
				t.Errorf("the warning does not say what failed: %q", e)
			}
		}
	}
	if warnings != 1 {
		t.Errorf("%d warnings for one failure repeated three times, want 1: %q", warnings, got)
	}
	if last := got[len(got)-1]; !strings.HasPrefix(last, "Normal "+reasonReloaded+": ") {
		t.Errorf("last Event %q, want the reload that succeeded", last)
	}
}

func TestURLTarget(t *testing.T) {
	var posts int
	mux := http.NewServeMux()
	mux.HandleFunc("POST /ok", func(w http.ResponseWriter, r *http.Request) { posts++ })
	mux.HandleFunc("POST /broken", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "config does not parse", http.StatusInternalServerError)
	})
	mux.HandleFunc("POST /moved", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://elsewhere.example/", http.StatusTemporaryRedirect)
	})
	plain := httptest.NewServer(mux)
	defer plain.Close()
	tlsServer := httptest.NewTLSServer(mux)
	defer tlsServer.Close()
	tests := []struct {
		name, url, wantErr string
	}{
		{"a 2xx answer is a reload", plain.URL + "/ok", ""},
		{"https is not verified: the request stays in the pod", tlsServer.URL + "/ok", ""},
		{"an error answer fails with its status and body", plain.URL + "/broken", "answered 500 Internal Server Error: config does not parse"},
		{"a redirect is not followed", plain.URL + "/moved", "answered 307 Temporary Redirect"},
		{"nothing listening", "http://127.0.0.1:1/reload", "connection refused"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := posts
			_, err := newURLTarget(tc.url).reload(context.Background())
			if tc.wantErr == "" {
				if err != nil || posts != before+1 {
					t.Fatalf("err = %v, posts %d, want one POST", err, posts-before)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.wantErr)
			}
		})
	}
}

// fakeProc is a /proc with the processes the tests describe: pid, parent, whether
// the reload marker is mounted in its mount namespace, and when it started (0: at its
// pid, so lower pids started earlier).
func fakeProc(t *testing.T, procs map[int]struct {
	ppid   int
	marked bool
	start  int
}) string {
	t.Helper()
	dir := t.TempDir()
	for pid, p := range procs {
		d := filepath.Join(dir, strconv.Itoa(pid))
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		mounts := "100 90 0:50 / / rw - overlay overlay rw\n101 100 0:51 / /var/run/trust-anchors ro - tmpfs tmpfs rw\n"
		if p.marked {
			mounts += "102 100 0:52 / " + contract.ReloadMarkerPath + " ro,relatime - tmpfs tmpfs rw\n"
		}
		_ = os.WriteFile(filepath.Join(d, "mountinfo"), []byte(mounts), 0o644)
		start := p.start
		if start == 0 {
			start = pid
		}
		stat := strconv.Itoa(pid) + " (a (tricky) name) S " + strconv.Itoa(p.ppid) + " 1 1 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 " + strconv.Itoa(start) + " 0 0\n"
		_ = os.WriteFile(filepath.Join(d, "stat"), []byte(stat), 0o644)
	}
	_ = os.WriteFile(filepath.Join(dir, "self"), nil, 0o644) // not a pid
	return dir
}

func TestSignalTarget_SignalsTheMarkedContainersMainProcess(t *testing.T) {
	type proc = struct {
		ppid   int
		marked bool
		start  int
	}
	tests := []struct {
		name     string
		procs    map[int]proc
		killErr  error
		wantPIDs []int
		wantErr  string
	}{
		{name: "the main process, not its children or other containers'", procs: map[int]proc{
			1: {0, false, 0}, 7: {0, true, 0}, 9: {7, true, 0}, 12: {9, true, 0}, 20: {0, false, 0}, 21: {20, false, 0},
		}, wantPIDs: []int{7}},
		{name: "a container whose main process was restarted", procs: map[int]proc{1: {0, false, 0}, 30: {0, true, 0}}, wantPIDs: []int{30}},
		{name: "not a kubectl exec session the runtime started in the container later, even with a lower pid (pids wrap)", procs: map[int]proc{
			1: {0, false, 0}, 700: {0, true, 100}, 5: {0, true, 900}, 6: {5, true, 901},
		}, wantPIDs: []int{700}},
		{name: "no marked process", procs: map[int]proc{1: {0, false, 0}, 20: {0, false, 0}},
			wantErr: "no process of container app is running, or the pod's process namespace is not shared"},
		{name: "another user's process", procs: map[int]proc{7: {0, true, 0}}, killErr: syscall.EPERM,
			wantErr: "not permitted to signal pid 7: the container must run as the sidecar's user"},
		{name: "a process gone meanwhile", procs: map[int]proc{7: {0, true, 0}}, killErr: syscall.ESRCH,
			wantErr: "exited before they could be signalled"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var killed []int
			s := newSignalTarget("SIGHUP", "app")
			s.procfs = fakeProc(t, tc.procs)
			s.kill = func(pid int, sig syscall.Signal) error {
				if sig != syscall.SIGHUP {
					t.Errorf("sent %v, want SIGHUP", sig)
				}
				if tc.killErr != nil {
					return tc.killErr
				}
				killed = append(killed, pid)
				return nil
			}
			what, err := s.reload(context.Background())
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(killed) != len(tc.wantPIDs) || killed[0] != tc.wantPIDs[0] {
				t.Fatalf("signalled %v, want %v", killed, tc.wantPIDs)
			}
			if want := "SIGHUP to container app (pid " + strconv.Itoa(tc.wantPIDs[0]) + ")"; what != want {
				t.Errorf("reported %q, want %q", what, want)
			}
		})
	}
}

func TestHasMountPoint_ReadsTheKernelsEscapes(t *testing.T) {
	info := []byte("36 35 98:0 /mnt1 /with\\040space rw - ext3 /dev/root rw\n")
	if !hasMountPoint(info, "/with space") {
		t.Error("an escaped space was not read")
	}
	if hasMountPoint(info, "/mnt1") {
		t.Error("the root field was taken for the mount point")
	}
}

// The node agent asks for the loopback URL the pod's annotation names, at the pod's
// own address: the port and path kept, the host replaced, the address asked anew for
// every request.
func TestPodURLTarget_CallsThePodsAddress(t *testing.T) {
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Method+" "+r.URL.Path+" "+r.UserAgent())
	}))
	defer srv.Close()
	_, port, _ := strings.Cut(strings.TrimPrefix(srv.URL, "http://"), ":")
	ip, ipErr := "127.0.0.1", error(nil)
	target := NewPodURLTarget("http://localhost:"+port+"/-/reload", func() (string, error) { return ip, ipErr })
	if _, err := target.reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	if want := []string{"POST /-/reload trustsync-agent"}; !slices.Equal(got, want) {
		t.Errorf("requests %q, want %q", got, want)
	}
	ipErr = errors.New(`pod apps/web-1 has no IP yet`)
	if _, err := target.reload(context.Background()); err == nil || err.Error() != ipErr.Error() {
		t.Errorf("without the pod's address: err = %v, want %v", err, ipErr)
	}
	ip, ipErr = "127.0.0.2", nil // another address: the request follows it
	if _, err := target.reload(context.Background()); err == nil || !strings.Contains(err.Error(), "127.0.0.2:"+port) {
		t.Errorf("err = %v, want the request to have gone to 127.0.0.2:%s (nothing listens there)", err, port)
	}
}
