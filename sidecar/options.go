package sidecar

import (
	"github.com/spf13/pflag"
	"github.com/spiffe/go-spiffe/v2/spiffeid"

	"github.com/trustsync/trustsync/delivery/contract"
	"github.com/trustsync/trustsync/delivery/render"
)

// Options are the sidecar's command line: the Spec the injector wrote into the pod
// and the Runtime around it, both as package contract defines them.
type Options struct {
	contract.Runtime
	Spec contract.Spec

	// flags, once registered, hold the Spec until Validate reads it back.
	flags *contract.Flags
	// identity is the SPIFFE ID the certificate is requested for, once Validate
	// has formed it (zero without a certificate).
	identity spiffeid.ID
}

// NewOptions returns the defaults, taking the pod's identity from the environment the
// injector fills from the downward API.
func NewOptions() *Options {
	return &Options{Runtime: contract.DefaultRuntime()}
}

// AddFlags registers the flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	o.flags = contract.AddFlags(fs, &o.Runtime)
}

// Validate reads the parsed flags into Spec and checks them. probe needs only the
// spec; run and init (needAPI) also need the pod's identity.
func (o *Options) Validate(needAPI bool) error {
	if o.flags != nil {
		spec, err := o.flags.Spec()
		if err != nil {
			return err
		}
		o.Spec = spec
	} else if err := o.Spec.Validate(); err != nil {
		return err
	}
	if !needAPI {
		return nil
	}
	if err := o.Runtime.Validate(o.Spec); err != nil {
		return err
	}
	if c := o.Spec.Certificate; c != nil {
		id, err := c.Identity(o.PodNamespace, o.ServiceAccount)
		if err != nil {
			return err
		}
		o.identity = id
	}
	return nil
}

// plan is the pod's sources as the pipeline reads them.
func (o *Options) plan() (*render.Plan, error) {
	return render.NewPlan(o.Spec.Sources, o.PodNamespace, o.Spec.Certificate != nil)
}
