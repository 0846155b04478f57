package federation

import (
	"bufio"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/trustsync/trustsync/test/controlplane"
	"github.com/trustsync/trustsync/test/poll"
)

// The bundle endpoint faces the network from the process that holds the CA keys, so
// what a client can make it hold is bounded: connections beyond the cap wait in the
// kernel's backlog (not in the signer), an idle kept-alive connection is closed after
// the idle timeout, and anything but a GET without a body is refused. A peer's fetch
// still works once the crowd is gone.
func TestBundleEndpoint_BoundsWhatAClientCanHold(t *testing.T) {
	c := start(t)
	c.liveB(t)
	const maxConns = 16
	port, err := controlplane.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	p, err := c.b.StartSigner(append(c.signerArgs, "--bundle-endpoint-bind-address="+addr,
		"--bundle-endpoint-max-connections="+strconv.Itoa(maxConns), "--bundle-endpoint-idle-timeout=2s")...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Stop(5 * time.Second) })
	url := "https://" + addr + "/" + tdB
	poll.Eventually(t, time.Minute, "the endpoint serves", func() (bool, string) {
		_, err := httpsGet(addr, url)
		return err == nil, errString(err)
	})
	t.Run("connections beyond the cap are not held by the signer", func(t *testing.T) {
		before := sockets(t, p.Pid())
		var crowd []net.Conn
		defer func() {
			for _, conn := range crowd {
				conn.Close()
			}
		}()
		for range 10 * maxConns {
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			crowd = append(crowd, conn)
		}
		// The accepted ones are the signer's at once (one fewer if a socket of the
		// probe above was still closing when counted); give the rest the same chance.
		poll.Eventually(t, 10*time.Second, "the signer accepts up to the cap", func() (bool, string) {
			n := sockets(t, p.Pid()) - before
			return n >= maxConns-1, strconv.Itoa(n) + " more sockets"
		})
		time.Sleep(time.Second) // what would be accepted beyond the cap, is by now
		if n := sockets(t, p.Pid()) - before; n > maxConns {
			t.Errorf("the signer holds %d more sockets for %d idle clients; want at most the cap, %d", n, len(crowd), maxConns)
		}
	})

	t.Run("an idle kept-alive connection is closed after the idle timeout", func(t *testing.T) {
		conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // the test reads what the server does, not who it is
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := io.WriteString(conn, "GET /"+tdB+" HTTP/1.1\r\nHost: "+addr+"\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		r := bufio.NewReader(conn)
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Close {
			t.Fatalf("HTTP %d, close %v: want a kept-alive 200", resp.StatusCode, resp.Close)
		}
		_ = conn.SetReadDeadline(time.Now().Add(15 * time.Second))
		start := time.Now()
		_, err = r.ReadByte()
		if !errors.Is(err, io.EOF) {
			t.Fatalf("the idle connection was not closed by the server: %v after %s", err, time.Since(start).Round(time.Millisecond))
		}
		t.Logf("the server closed the idle connection after %s", time.Since(start).Round(time.Millisecond))
	})

	for _, tc := range []struct {
		name, request string
		want          int
	}{
		{"a POST is refused", "POST /" + tdB + " HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n", http.StatusMethodNotAllowed},
		{"a GET with a body is refused", "GET /" + tdB + " HTTP/1.1\r\nHost: h\r\nContent-Length: 100000\r\n\r\nslow", http.StatusRequestEntityTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // as above
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if _, err := io.WriteString(conn, tc.request); err != nil {
				t.Fatal(err)
			}
			_ = conn.SetReadDeadline(time.Now().Add(15 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.want || !resp.Close {
				t.Errorf("HTTP %d, close %v; want %d and the connection closed", resp.StatusCode, resp.Close, tc.want)
			}
		})
	}

	poll.Eventually(t, 30*time.Second, "a peer's fetch once the crowd is gone", func() (bool, string) {
		_, err := httpsGet(addr, url)
		return err == nil, errString(err)
	})
}

// httpsGet fetches url over TLS without authenticating the server (the bounds, not
// the identity, are under test; the import tests authenticate).
func httpsGet(addr, url string) ([]byte, error) {
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true, TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // as above
	defer client.CloseIdleConnections()
	resp, err := client.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = errors.New(resp.Status + ": " + string(body))
	}
	return body, err
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// sockets counts the process's open sockets.
func sockets(t *testing.T, pid int) int {
	t.Helper()
	dir := filepath.Join("/proc", strconv.Itoa(pid), "fd")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range entries {
		if target, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil && strings.HasPrefix(target, "socket:") {
			n++
		}
	}
	return n
}
