package webhook

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"testing/iotest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/trustsync/trustsync/test/poll"
)

// failingReader fails the test's expectation if anyone reads it.
type failingReader struct{ read *atomic.Bool }

func (f failingReader) Read([]byte) (int, error) { f.read.Store(true); return 0, errors.New("read") }

func TestBodyBudget_RefusesOversizedReviewsWith413(t *testing.T) {
	var reached atomic.Bool
	h := newBodyBudget(DefaultReviewBytesInFlight).limit(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { reached.Store(true) }))

	t.Run("a declared length over the limit, before reading the body", func(t *testing.T) {
		var read atomic.Bool
		r := httptest.NewRequest(http.MethodPost, "/mutate/pods", failingReader{&read})
		r.ContentLength = MaxReviewBytes + 1
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		if rec.Code != http.StatusRequestEntityTooLarge || read.Load() || reached.Load() {
			t.Fatalf("status %d, body read %v, handler reached %v; want 413 without reading", rec.Code, read.Load(), reached.Load())
		}
	})
	t.Run("a body of unknown length that turns out too large", func(t *testing.T) {
		r := httptest.NewRequest(http.MethodPost, "/mutate/pods", io.MultiReader(strings.NewReader(strings.Repeat("x", MaxReviewBytes)), strings.NewReader("y")))
		r.ContentLength = -1
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		if rec.Code != http.StatusRequestEntityTooLarge || reached.Load() {
			t.Fatalf("status %d, handler reached %v; want 413", rec.Code, reached.Load())
		}
		if !strings.Contains(rec.Body.String(), "larger than the 6291456-byte limit") {
			t.Errorf("message %q does not say the limit", rec.Body.String())
		}
	})
	t.Run("a review of exactly the limit passes whole", func(t *testing.T) {
		body := strings.Repeat("z", MaxReviewBytes)
		var got int
		ok := newBodyBudget(DefaultReviewBytesInFlight).limit(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			got = len(b)
		}))
		rec := httptest.NewRecorder()
		ok.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/mutate/pods", strings.NewReader(body)))
		if rec.Code != http.StatusOK || got != MaxReviewBytes {
			t.Fatalf("status %d, handler got %d bytes; want 200 with all %d", rec.Code, got, MaxReviewBytes)
		}
	})
}

// Reviews are held only while the bytes in flight fit the budget; the others wait, and
// one whose caller gives up gets 503 instead of taking memory.
func TestBodyBudget_BoundsTheBytesInFlight(t *testing.T) {
	release := make(chan struct{})
	var inFlight, peak atomic.Int64
	b := newBodyBudget(2 * MaxReviewBytes)
	h := b.limit(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		n := inFlight.Add(r.ContentLength)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		<-release
		inFlight.Add(-r.ContentLength)
	}))
	big := bytes.Repeat([]byte("x"), MaxReviewBytes)
	done := make(chan int, 5)
	for range 5 {
		go func() {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/mutate/pods", bytes.NewReader(big)))
			done <- rec.Code
		}()
	}
	// Every review has arrived: two in the handler and three waiting for room, or, were
	// the budget broken, more than two in the handler.
	deadline := time.Now().Add(10 * time.Second)
	for inFlight.Load()+b.waiting.Load()*MaxReviewBytes < 5*MaxReviewBytes && inFlight.Load() <= 2*MaxReviewBytes {
		if time.Now().After(deadline) {
			t.Fatalf("after 10 s, %d bytes in the handler and %d reviews waiting; want all five arrived", inFlight.Load(), b.waiting.Load())
		}
		time.Sleep(time.Millisecond)
	}
	if got := inFlight.Load(); got != 2*MaxReviewBytes {
		t.Fatalf("%d bytes in the handler with a budget of two reviews, want %d", got, 2*MaxReviewBytes)
	}
	close(release)
	for range 5 {
		if code := <-done; code != http.StatusOK {
			t.Errorf("a waiting review got %d, want it served once room was made", code)
		}
	}
	if peak.Load() > 2*MaxReviewBytes {
		t.Errorf("peak %d bytes in flight, over the budget", peak.Load())
	}

	t.Run("a caller that gives up while waiting gets 503", func(t *testing.T) {
		block, started := make(chan struct{}), make(chan struct{})
		h := newBodyBudget(MaxReviewBytes).limit(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { close(started); <-block }))
		defer close(block)
		go h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/mutate/pods", bytes.NewReader(big)))
		<-started
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/mutate/pods", bytes.NewReader(big)).WithContext(ctx))
		if rec.Code != http.StatusServiceUnavailable {
			t.Fatalf("status %d, want 503", rec.Code)
		}
	})
}

// trickle opens a TLS connection to srv that declares a body of declared bytes for
// /mutate/pods and sends one byte every interval until the test ends: a hostile tenant
// holding the webhook's port.
func trickle(t *testing.T, srv *httptest.Server, declared int, query string, interval time.Duration) *tls.Conn {
	t.Helper()
	conn, err := tls.Dial("tcp", srv.Listener.Addr().String(), &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	if _, err := fmt.Fprintf(conn, "POST /mutate/pods%s HTTP/1.1\r\nHost: webhook\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", query, declared); err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			if _, err := conn.Write([]byte("x")); err != nil {
				return
			}
			time.Sleep(interval)
		}
	}()
	return conn
}

// Slow senders hold only the bytes they sent, never the budget their declared length
// would take: with any number of them trickling, a legitimate review is answered. On
// the webhook before the receiving stage, three connections declaring 6,000,000 bytes
// stopped every review until they gave up.
func TestBodyBudget_SlowSendersCannotHoldTheBudgetFastReviewsNeed(t *testing.T) {
	for _, senders := range []int{3, 50} {
		t.Run(fmt.Sprintf("%d slow senders", senders), func(t *testing.T) {
			b := newBodyBudget(DefaultReviewBytesInFlight)
			srv := httptest.NewTLSServer(b.limit(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				n, _ := io.Copy(io.Discard, r.Body)
				fmt.Fprintf(w, "%d", n)
			})))
			t.Cleanup(srv.Close) // after the slow senders' connections close
			for range senders {
				trickle(t, srv, 6_000_000, "", 50*time.Millisecond)
			}
			// Every slow sender is being received: each has had a byte charged.
			deadline := time.Now().Add(20 * time.Second)
			for b.arriving.Load() < int64(senders) {
				if time.Now().After(deadline) {
					t.Fatalf("only %d bytes arriving after 20 s, want %d senders' first bytes", b.arriving.Load(), senders)
				}
				time.Sleep(time.Millisecond)
			}
			// The largest review there is, and ordinary ones, are answered meanwhile; a
			// client that waits far longer than any answer takes tells a held budget.
			client := srv.Client()
			client.Timeout = 15 * time.Second
			for _, size := range []int{MaxReviewBytes, 4 << 10, 4 << 10} {
				resp, err := client.Post(srv.URL+"/mutate/pods?timeout=10s", "application/json", bytes.NewReader(bytes.Repeat([]byte("y"), size)))
				if err != nil {
					t.Fatalf("a %d-byte review while %d senders trickle: %v", size, senders, err)
				}
				got, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK || string(got) != strconv.Itoa(size) {
					t.Fatalf("a %d-byte review while %d senders trickle: HTTP %d %q", size, senders, resp.StatusCode, got)
				}
			}
			if held := b.arriving.Load(); held > int64(senders)*minGrowth {
				t.Errorf("the slow senders hold %d bytes of the receiving budget, want at most %d each", held, minGrowth)
			}
		})
	}
}

// A body that takes longer than the review's timeout (or MaxBodyWait) is answered
// 408, saying so, and what it held is released; through every route's handler chain,
// which must let the deadline reach the connection.
func TestBodyBudget_ABodySlowerThanItsTimeoutIsCutOff(t *testing.T) {
	s := newTestServer(t, "", nil)
	srv := httptest.NewTLSServer(s.handler)
	t.Cleanup(srv.Close)
	conn := trickle(t, srv, 6_000_000, "?timeout=1s", 100*time.Millisecond)
	_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to a body slower than its 1 s timeout: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(body), "did not arrive within 1s") {
		t.Fatalf("HTTP %d %q; want 408 saying the body did not arrive within 1s", resp.StatusCode, body)
	}
	if got := gauge(t, s.registry, "trustsync_webhook_arriving_review_bytes"); got != 0 {
		t.Errorf("%v bytes still charged after the body was cut off", got)
	}
}

// gauge reads one unlabelled gauge from reg.
func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name {
			return f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

func TestBodyWait_IsTheReviewsTimeoutAtMostMaxBodyWait(t *testing.T) {
	for query, want := range map[string]time.Duration{
		"":               MaxBodyWait,
		"?timeout=10s":   10 * time.Second,
		"?timeout=5m":    MaxBodyWait,
		"?timeout=-1s":   MaxBodyWait,
		"?timeout=bogus": MaxBodyWait,
	} {
		if got := bodyWait(httptest.NewRequest(http.MethodPost, "/mutate/pods"+query, nil)); got != want {
			t.Errorf("bodyWait(%q) = %s, want %s", query, got, want)
		}
	}
}

// Bodies arriving beyond the receiving budget wait for room, holding nothing, and are
// served once there is some; one that finds none before its deadline gets 503.
func TestBodyBudget_ABurstBeyondTheReceivingBudgetWaitsForRoom(t *testing.T) {
	b := newBodyBudget(MaxReviewBytes)
	if !b.receiving.TryAcquire(receivingFactor * MaxReviewBytes) {
		t.Fatal("cannot fill the receiving budget")
	}
	h := b.limit(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		fmt.Fprintf(w, "%d", n)
	}))

	t.Run("no room before the deadline: 503", func(t *testing.T) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/mutate/pods?timeout=100ms", strings.NewReader("{}")))
		if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "arriving at once") {
			t.Fatalf("HTTP %d %q, want 503 saying too many bytes are arriving", rec.Code, rec.Body.String())
		}
		if got := b.arriving.Load(); got != 0 {
			t.Errorf("%d bytes still charged to the refused body", got)
		}
	})
	t.Run("room made while it waits: served", func(t *testing.T) {
		done := make(chan *httptest.ResponseRecorder)
		go func() {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/mutate/pods?timeout=20s", strings.NewReader(`{"review":1}`)))
			done <- rec
		}()
		poll.True(t, 10*time.Second, "the body waiting for room", func() bool { return b.receivingWaiters.Load() == 1 })
		b.receiving.Release(receivingFactor * MaxReviewBytes)
		rec := <-done
		if rec.Code != http.StatusOK || rec.Body.String() != "12" {
			t.Fatalf("HTTP %d %q, want the whole body served", rec.Code, rec.Body.String())
		}
		if got := b.arriving.Load(); got != 0 {
			t.Errorf("%d bytes still charged after the review was answered", got)
		}
	})
}

// A body shorter than it declared is a clear 400, never a truncated review decoded.
func TestBodyBudget_ABodyShorterThanDeclaredIsRefused(t *testing.T) {
	r := httptest.NewRequest(http.MethodPost, "/mutate/pods", io.MultiReader(strings.NewReader("{}"), iotest.ErrReader(io.ErrUnexpectedEOF)))
	r.ContentLength = 100
	rec := httptest.NewRecorder()
	newBodyBudget(DefaultReviewBytesInFlight).limit(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { t.Error("handler reached") })).ServeHTTP(rec, r)
	if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "ended after 2 of the 100 bytes it declared") {
		t.Fatalf("HTTP %d %q", rec.Code, rec.Body.String())
	}
}

// BenchmarkReview_WhileSlowSendersTrickle is the latency of an ordinary review (4 KiB)
// while N connections each declare 6,000,000 bytes and send one byte every 50 ms.
func BenchmarkReview_WhileSlowSendersTrickle(b *testing.B) {
	for _, senders := range []int{0, 3, 10, 50} {
		b.Run(fmt.Sprintf("senders=%d", senders), func(b *testing.B) {
			t := &testing.T{}
			budget := newBodyBudget(DefaultReviewBytesInFlight)
			srv := httptest.NewTLSServer(budget.limit(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
			})))
			defer srv.Close()
			var conns []*tls.Conn
			for range senders {
				conns = append(conns, trickle(t, srv, 6_000_000, "", 50*time.Millisecond))
			}
			defer func() {
				for _, c := range conns {
					_ = c.Close()
				}
			}()
			if err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
				return budget.arriving.Load() >= int64(senders), nil
			}); err != nil {
				b.Fatalf("%d of %d slow senders arriving after 30s: %v", budget.arriving.Load(), senders, err)
			}
			client := srv.Client()
			client.Timeout = 15 * time.Second
			review := bytes.Repeat([]byte("y"), 4<<10)
			b.ResetTimer()
			for range b.N {
				resp, err := client.Post(srv.URL+"/mutate/pods", "application/json", bytes.NewReader(review))
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
}
