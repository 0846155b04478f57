package webhook

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
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
	h := newBodyBudget(2 * MaxReviewBytes).limit(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
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
	deadline := time.Now().Add(10 * time.Second)
	for inFlight.Load() < 2*MaxReviewBytes && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // a third, were it let in, would show now
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
