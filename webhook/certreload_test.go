package webhook

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/trustsync/trustsync/test/fixtures"
)

// writePair replaces cert and key files atomically, as a Secret volume update does.
func writePair(t *testing.T, dir string, c *fixtures.Cert) {
	t.Helper()
	for name, data := range map[string][]byte{"tls.crt": c.CertPEM(), "tls.key": c.KeyPEM()} {
		tmp := filepath.Join(dir, "."+name+".tmp")
		if err := os.WriteFile(tmp, data, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
}

func servedSerial(t *testing.T, r *certReloader) string {
	t.Helper()
	c, err := r.GetCertificate(nil)
	if err != nil {
		t.Fatal(err)
	}
	return c.Leaf.SerialNumber.String()
}

func TestCertReloader(t *testing.T) {
	dir := t.TempDir()
	first, second, third := fixtures.CA("first"), fixtures.CA("second"), fixtures.CA("third")
	writePair(t, dir, first)
	clk := clocktesting.NewFakePassiveClock(testNow)
	r, err := newCertReloader(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), time.Second, clk)
	if err != nil {
		t.Fatal(err)
	}
	serial := func(c *fixtures.Cert) string { return c.Cert.SerialNumber.String() }

	if got := servedSerial(t, r); got != serial(first) {
		t.Fatalf("serving %s, want the first certificate", got)
	}

	writePair(t, dir, second)
	if got := servedSerial(t, r); got != serial(first) {
		t.Error("files are checked at most once per interval, but a change was picked up at once")
	}
	clk.SetTime(testNow.Add(time.Second))
	if got := servedSerial(t, r); got != serial(second) {
		t.Errorf("a replaced pair was not picked up after the interval")
	}

	// Caught mid-rotation: the new certificate with the old key does not load.
	if err := os.WriteFile(filepath.Join(dir, "tls.crt"), third.CertPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	clk.SetTime(testNow.Add(2 * time.Second))
	if got := servedSerial(t, r); got != serial(second) {
		t.Error("a mismatched pair replaced the working certificate")
	}
	writePair(t, dir, third)
	clk.SetTime(testNow.Add(3 * time.Second))
	if got := servedSerial(t, r); got != serial(third) {
		t.Error("the completed pair was not picked up")
	}

	// Files gone (a volume unmounted): keep serving what works.
	if err := os.Remove(filepath.Join(dir, "tls.key")); err != nil {
		t.Fatal(err)
	}
	clk.SetTime(testNow.Add(4 * time.Second))
	if got := servedSerial(t, r); got != serial(third) {
		t.Error("a missing key file dropped the working certificate")
	}
}

func TestCertReloader_RefusesToStartWithoutAPair(t *testing.T) {
	dir := t.TempDir()
	if _, err := newCertReloader(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), time.Second, clocktesting.NewFakePassiveClock(testNow)); err == nil {
		t.Fatal("started without certificate files")
	}
	other := fixtures.CA("other")
	writePair(t, dir, fixtures.CA("mine"))
	if err := os.WriteFile(filepath.Join(dir, "tls.key"), other.KeyPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := newCertReloader(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), time.Second, clocktesting.NewFakePassiveClock(testNow)); err == nil {
		t.Fatal("started with a key that does not match the certificate")
	}
}
