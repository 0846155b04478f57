package controlplane

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
)

// resources maps objects to their dynamic client resource.
type resources struct {
	mapper *restmapper.DeferredDiscoveryRESTMapper
	client dynamic.Interface
}

func newResources(cfg *rest.Config) (*resources, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	client, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &resources{mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc)), client: client}, nil
}

func (r *resources) of(u *unstructured.Unstructured) (dynamic.ResourceInterface, error) {
	gvk := u.GroupVersionKind()
	mapping, err := r.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, fmt.Errorf("no resource for %s: %w", gvk, err)
	}
	if ns := u.GetNamespace(); ns != "" {
		return r.client.Resource(mapping.Resource).Namespace(ns), nil
	}
	return r.client.Resource(mapping.Resource), nil
}

// Get reads the stored version of u.
func Get(ctx context.Context, cfg *rest.Config, u *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	r, err := newResources(cfg)
	if err != nil {
		return nil, err
	}
	res, err := r.of(u)
	if err != nil {
		return nil, err
	}
	return res.Get(ctx, u.GetName(), metav1.GetOptions{})
}

// Apply server-side applies every object in a multi-document YAML stream, as
// `kubectl apply --server-side` would, and returns them.
func Apply(ctx context.Context, cfg *rest.Config, manifests []byte) ([]*unstructured.Unstructured, error) {
	r, err := newResources(cfg)
	if err != nil {
		return nil, err
	}
	var applied []*unstructured.Unstructured
	decoder := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(manifests), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := decoder.Decode(&u.Object); errors.Is(err, io.EOF) {
			return applied, nil
		} else if err != nil {
			return nil, fmt.Errorf("failed to decode manifest: %w", err)
		}
		if len(u.Object) == 0 {
			continue
		}
		res, err := r.of(u)
		if err != nil {
			return nil, err
		}
		out, err := res.Apply(ctx, u.GetName(), u, metav1.ApplyOptions{FieldManager: "trustsync-e2e", Force: true})
		if err != nil {
			return nil, fmt.Errorf("failed to apply %s %q: %w", u.GetKind(), u.GetName(), err)
		}
		applied = append(applied, out)
	}
}

// TemplateKubeVersion is the Kubernetes release helm template renders for: the one the
// tests run. Without it helm assumes an old one, which the chart's kubeVersion refuses.
const TemplateKubeVersion = "--kube-version=1.37.1"

// RenderChart runs `helm template` on the trustsync chart with the given arguments
// (--set, --show-only, ...) using the pinned helm binary.
func RenderChart(args ...string) ([]byte, error) {
	bin, err := BinDir()
	if err != nil {
		return nil, err
	}
	root, err := moduleRoot()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(filepath.Join(bin, "helm"), append([]string{"template", "trustsync", filepath.Join(root, "charts", "trustsync"), TemplateKubeVersion}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("helm template %v: %w: %s", args, err, stderr.String())
	}
	return out, nil
}

var (
	builtMu sync.Mutex
	built   = map[string]string{}
	buildTo string
)

// FIPSModule is the Go Cryptographic Module FIPS builds use: the CMVP-validated one
// (make build FIPS=1 takes the same).
const FIPSModule = "v1.0.0"

// BuildVersion is the version make build stamps into this tree's binaries
// (hack/version.sh: VERSION, and between releases what git describe adds), asked once
// per test process.
var BuildVersion = sync.OnceValues(func() (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	out, err := exec.Command(filepath.Join(root, "hack", "version.sh")).Output()
	if err != nil {
		return "", fmt.Errorf("hack/version.sh: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
})

// BuildBinary builds cmd/<name> of this module once per test process and returns the
// binary's path, so e2e tests run the real binary whatever `make` did before;
// "signer-pkcs11" is cmd/signer built with cgo, "<name>-fips" cmd/<name> built with
// FIPSModule.
func BuildBinary(name string) (string, error) {
	builtMu.Lock()
	defer builtMu.Unlock()
	if path, ok := built[name]; ok {
		return path, nil
	}
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	if buildTo == "" {
		if buildTo, err = os.MkdirTemp("", "trustsync-e2e-bin-"); err != nil {
			return "", err
		}
	}
	path := filepath.Join(buildTo, "trustsync-"+name)
	// Built as `make build` and the image build it: what is measured is what ships.
	version, err := BuildVersion()
	if err != nil {
		return "", err
	}
	// trustsync-signer-pkcs11 is the signer built with cgo, which loading a PKCS#11
	// module needs; every other binary is static. A -fips suffix builds with Go's
	// FIPS 140-3 module, as make build FIPS=1 does.
	pkg, fips := strings.CutSuffix(name, "-fips")
	pkg, cgo := strings.CutSuffix(pkg, "-pkcs11")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w -X github.com/trustsync/trustsync/buildinfo.Version="+version, "-o", path, "./cmd/"+pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if cgo {
		cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
	}
	if fips {
		cmd.Env = append(cmd.Env, "GOFIPS140="+FIPSModule)
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/%s: %w\n%s", pkg, err, out)
	}
	built[name] = path
	return path, nil
}
