package contract

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/spf13/pflag"
)

// The node agent's CSI volume carries the same Spec as the sidecar's command line, as
// volume attributes: each flag the injector would pass becomes an attribute of the
// same name, so one contract serves both deliveries. The agent chooses the directory
// and the state directory itself, so --dir and --state-dir are not attributes.

// CSIDriverName is the node agent's CSI driver: the injector names it in the pod's
// volume, the agent registers it with the kubelet, the chart installs its CSIDriver.
const CSIDriverName = "csi.trustsync.io"

// KubeletAttributePrefix starts the attributes the kubelet adds to a publish request
// (the pod's name, namespace, uid, ServiceAccount and tokens); they are not the Spec.
const KubeletAttributePrefix = "csi.storage.k8s.io/"

// attributeFlags are the Spec's flags a volume attribute may set.
var attributeFlags = []string{
	FlagSources, FlagCertificate, FlagCertificateSigner, FlagCertificateKeyType, FlagCertificateExpirationSeconds,
	FlagCertificateDNSNames, FlagCertificateCredentialBundle, FlagTrustDomain, FlagReloadURL, FlagReloadSettle, FlagExpiryWarningDays,
}

// Attributes renders the spec as volume attributes for the node agent: the flags Args
// renders, by name, without the directories. A flag without a value is "true".
func (s Spec) Attributes() map[string]string {
	attrs := map[string]string{}
	for _, arg := range s.Args() {
		name, value, hasValue := strings.Cut(strings.TrimPrefix(arg, "--"), "=")
		if !hasValue {
			value = "true"
		}
		if name != FlagDir && name != FlagStateDir {
			attrs[name] = value
		}
	}
	return attrs
}

// SpecFromAttributes reads a volume's attributes back into the Spec that writes into
// dir, keeping a certificate's pending key in stateDir. Attributes the kubelet adds
// are ignored; any other attribute that is not one of the Spec's is refused by name,
// and so is what the agent cannot do for a pod (a reload signal: it is not in the
// pod's process namespace).
func SpecFromAttributes(attrs map[string]string, dir, stateDir string) (Spec, error) {
	fs := pflag.NewFlagSet("volume attributes", pflag.ContinueOnError)
	rt := DefaultRuntime()
	f := AddFlags(fs, &rt)
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(attrs)) {
		value := attrs[name]
		switch {
		case strings.HasPrefix(name, KubeletAttributePrefix):
		case name == FlagReloadSignal || name == FlagReloadContainer:
			errs = append(errs, fmt.Errorf("volume attribute %q: the node agent cannot signal a container's process (it is not in the pod's process namespace); use %s, or the sidecar", name, FlagReloadURL))
		case !slices.Contains(attributeFlags, name):
			errs = append(errs, fmt.Errorf("unknown volume attribute %q; the attributes are %s (as the injector writes them from the pod's annotations)", name, strings.Join(attributeFlags, ", ")))
		default:
			if err := fs.Set(name, value); err != nil {
				errs = append(errs, fmt.Errorf("volume attribute %q: %w", name, err))
			}
		}
	}
	if len(errs) > 0 {
		return Spec{}, errors.Join(errs...)
	}
	if err := errors.Join(fs.Set(FlagDir, dir), fs.Set(FlagStateDir, stateDir)); err != nil {
		return Spec{}, err
	}
	s, err := f.Spec()
	if err != nil {
		return Spec{}, fmt.Errorf("volume attributes: %w", err)
	}
	return s, nil
}

// SpecFromArgs reads the Spec back from an injected sidecar's arguments (its
// subcommand first, then Args' flags and the runtime's), as someone looking at the pod
// finds them: what the sidecar writes, and from what.
func SpecFromArgs(args []string) (Spec, error) {
	fs := pflag.NewFlagSet("sidecar arguments", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	rt := DefaultRuntime()
	f := AddFlags(fs, &rt)
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		args = args[1:]
	}
	if err := fs.Parse(args); err != nil {
		return Spec{}, fmt.Errorf("sidecar arguments: %w", err)
	}
	s, err := f.Spec()
	if err != nil {
		return Spec{}, fmt.Errorf("sidecar arguments: %w", err)
	}
	return s, nil
}
