package webhook

import (
	"crypto/tls"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// certReloader serves the certificate and key in two files, picking up new ones
// without a restart: kubelet-mounted Secrets and cert-manager both replace the files
// in place. Each TLS handshake asks for the certificate; at most once per interval the
// files are checked, and a changed pair is loaded. A pair that fails to load (caught
// between the two files being replaced, say) leaves the current certificate in use,
// so no handshake ever fails because of a rotation.
type certReloader struct {
	certFile, keyFile string
	interval          time.Duration
	clock             clock.PassiveClock

	mu        sync.Mutex
	current   *tls.Certificate
	stamp     [2]fileStamp
	lastCheck time.Time
}

// fileStamp identifies one version of a file. Inode catches atomic replacement
// (rename, symlink swap) even within one mtime tick.
type fileStamp struct {
	modTime time.Time
	size    int64
	inode   uint64
}

func stampOf(path string) (fileStamp, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{}, err
	}
	s := fileStamp{modTime: fi.ModTime(), size: fi.Size()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		s.inode = st.Ino
	}
	return s, nil
}

func newCertReloader(certFile, keyFile string, interval time.Duration, clk clock.PassiveClock) (*certReloader, error) {
	r := &certReloader{certFile: certFile, keyFile: keyFile, interval: interval, clock: clk}
	stamps, err := r.stamps()
	if err != nil {
		return nil, err
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("failed to load serving certificate %s and key %s: %w", certFile, keyFile, err)
	}
	r.current, r.stamp, r.lastCheck = &cert, stamps, clk.Now()
	return r, nil
}

func (r *certReloader) stamps() ([2]fileStamp, error) {
	c, err := stampOf(r.certFile)
	if err != nil {
		return [2]fileStamp{}, fmt.Errorf("cannot read serving certificate: %w", err)
	}
	k, err := stampOf(r.keyFile)
	if err != nil {
		return [2]fileStamp{}, fmt.Errorf("cannot read serving key: %w", err)
	}
	return [2]fileStamp{c, k}, nil
}

// GetCertificate is tls.Config's hook.
func (r *certReloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if now := r.clock.Now(); now.Sub(r.lastCheck) >= r.interval {
		r.lastCheck = now
		r.reloadLocked()
	}
	return r.current, nil
}

func (r *certReloader) reloadLocked() {
	stamps, err := r.stamps()
	if err != nil {
		klog.ErrorS(err, "Keeping the current serving certificate")
		return
	}
	if stamps == r.stamp {
		return
	}
	cert, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		// Most likely the two files are mid-replacement; the next check retries.
		klog.InfoS("Serving certificate files changed but do not load yet; keeping the current certificate", "certFile", r.certFile, "err", err)
		return
	}
	r.current, r.stamp = &cert, stamps
	klog.InfoS("Loaded new serving certificate", "certFile", r.certFile)
}
