package plugin

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustsync/trustsync/bundle"
)

// Inspected is what inspect found in a Secret, a ConfigMap or a file.
type Inspected struct {
	// Source is "Secret NAMESPACE/NAME", "ConfigMap NAMESPACE/NAME" or "file PATH".
	Source string         `json:"source"`
	Keys   []InspectedKey `json:"keys"`
	// KeyPlace, for a trustsync signer's CA Secret, is where its CA key lives: "secret"
	// or its place in the keeper (trustsync.io/key), never the key.
	KeyPlace string `json:"keyPlace,omitempty"`
	// HoldersNotRead says why who holds each anchor was not read (no right to read
	// pods and reports cluster-wide, say).
	HoldersNotRead string `json:"holdersNotRead,omitempty"`
}

// InspectedKey is one key of the object (or the file): its certificates, or why it
// holds none.
type InspectedKey struct {
	Key     string            `json:"key"`
	Anchors []InspectedAnchor `json:"anchors"`
	// PrivateKey: the key holds a private key, which is never printed.
	PrivateKey bool `json:"privateKey,omitempty"`
	// Detail says what a key without certificates holds.
	Detail string `json:"detail,omitempty"`
}

// InspectedAnchor is one certificate of a key.
type InspectedAnchor struct {
	SHA256    string    `json:"sha256"`
	Subject   string    `json:"subject"`
	Issuer    string    `json:"issuer"`
	IsCA      bool      `json:"isCA"`
	NotBefore time.Time `json:"notBefore"`
	NotAfter  time.Time `json:"notAfter"`
	// HeldBy counts the pods' files and the objects holding it (who-trusts has them).
	HeldBy *int `json:"heldBy,omitempty"`
}

func (o *options) inspectCommand() *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "inspect (secret|configmap NAME | -f FILE)",
		Short: "What a Secret, ConfigMap or file holds: each certificate's SHA-256, subject, issuer and expiry, and how many pods and objects hold it",
		Example: `  # The signer's CA Secret: its CAs, and where its key lives
  kubectl trustsync inspect secret trustsync-ca-trustsync.io-workload -n trustsync-system
  # A TrustTarget's ConfigMap, as JSON
  kubectl trustsync inspect configmap trust-ca -n payments -o json
  # A PEM file on disk
  kubectl trustsync inspect -f ca.pem`,
		Args: func(_ *cobra.Command, args []string) error {
			switch {
			case file != "" && len(args) > 0:
				return fmt.Errorf("give -f FILE or a kind and a name, not both")
			case file != "":
				return nil
			case len(args) != 2:
				return fmt.Errorf("give secret NAME, configmap NAME or -f FILE")
			case args[0] != "secret" && args[0] != "configmap":
				return fmt.Errorf("%q: inspect reads a secret or a configmap (or -f FILE)", args[0])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.output == outputName || o.wide() {
				return fmt.Errorf("inspect prints a table, or -o json, yaml or a template")
			}
			return o.inspect(cmd.Context(), args, file)
		},
	}
	cmd.Flags().StringVarP(&file, "filename", "f", "", "A PEM file to inspect instead of an object.")
	return cmd
}

func (o *options) inspect(ctx context.Context, args []string, file string) error {
	var in Inspected
	var data map[string][]byte
	if file != "" {
		raw, err := os.ReadFile(file)
		if err != nil {
			return err
		}
		in.Source, data = "file "+file, map[string][]byte{file: raw}
	} else {
		ns, err := o.namespace()
		if err != nil {
			return err
		}
		c, err := o.clients()
		if err != nil {
			return err
		}
		switch args[0] {
		case "secret":
			s, err := c.core.CoreV1().Secrets(ns).Get(ctx, args[1], metav1.GetOptions{})
			if err != nil {
				return readErr(err, "get on secrets")
			}
			in.Source, data = "Secret "+ns+"/"+s.Name, s.Data
			// A trustsync signer's CA Secret (it names its signer) says where the key is.
			if _, signer := s.Annotations["trustsync.io/signer-name"]; signer {
				in.KeyPlace = s.Annotations["trustsync.io/key"]
				if len(s.Data["tls.key"]) > 0 {
					in.KeyPlace = "secret"
				}
			}
		case "configmap":
			cm, err := c.core.CoreV1().ConfigMaps(ns).Get(ctx, args[1], metav1.GetOptions{})
			if err != nil {
				return readErr(err, "get on configmaps")
			}
			in.Source, data = "ConfigMap "+ns+"/"+cm.Name, map[string][]byte{}
			for k, v := range cm.Data {
				data[k] = []byte(v)
			}
			for k, v := range cm.BinaryData {
				data[k] = v
			}
		}
	}
	keys := make([]string, 0, len(data))
	for k := range data {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		in.Keys = append(in.Keys, inspectKey(k, data[k]))
	}
	o.countHolders(ctx, &in)
	if printed, err := printStructured(o, []Inspected{in}); printed || err != nil {
		return err
	}
	fmt.Fprintf(o.stdout, "%s\n", safe(in.Source))
	if in.KeyPlace != "" {
		fmt.Fprintf(o.stdout, "CA key:%s\n", keyPlace(in.KeyPlace))
	}
	w := tabwriter.NewWriter(o.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "KEY\tSHA-256\tSUBJECT\tISSUER\tNOT AFTER\tHELD BY")
	for _, k := range in.Keys {
		if len(k.Anchors) == 0 {
			fmt.Fprintf(w, "%s\t-\t%s\t\t\t\n", safe(k.Key), safe(k.Detail))
			continue
		}
		for _, a := range k.Anchors {
			held := "-"
			if a.HeldBy != nil {
				held = fmt.Sprintf("%d", *a.HeldBy)
			}
			issuer := safe(a.Issuer)
			if a.Issuer == a.Subject {
				issuer = "(itself)"
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", safe(k.Key), a.SHA256[:12], safe(a.Subject), issuer, a.NotAfter.UTC().Format(time.RFC3339), held)
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if in.HoldersNotRead != "" {
		fmt.Fprintf(o.stdout, "Held by: not read (%s)\n", in.HoldersNotRead)
	}
	return nil
}

// inspectKey reads one key: its PEM certificates, whatever else is beside them (a
// TLS Secret's key, say), never a private key's bytes.
func inspectKey(key string, data []byte) InspectedKey {
	k := InspectedKey{Key: key, Anchors: []InspectedAnchor{}}
	var other []string
	for rest := data; ; {
		var block *pem.Block
		if block, rest = pem.Decode(rest); block == nil {
			break
		}
		switch {
		case block.Type == "CERTIFICATE":
			c, err := x509.ParseCertificate(block.Bytes)
			if err != nil {
				other = append(other, "a certificate that does not parse: "+err.Error())
				continue
			}
			k.Anchors = append(k.Anchors, inspectedAnchor(c))
		case strings.HasSuffix(block.Type, "PRIVATE KEY"):
			k.PrivateKey = true
		default:
			other = append(other, "a PEM block of type "+block.Type)
		}
	}
	switch {
	case len(other) > 0:
		k.Detail = "also " + strings.Join(other, ", ")
	case len(k.Anchors) > 0:
	case k.PrivateKey:
		k.Detail = "a private key (not shown)"
	case len(data) == 0:
		k.Detail = "empty"
	default:
		k.Detail = fmt.Sprintf("no PEM certificate (%d bytes: a truststore, whose password the agent reads, or not trust at all)", len(data))
	}
	return k
}

func inspectedAnchor(c *x509.Certificate) InspectedAnchor {
	return InspectedAnchor{SHA256: bundle.AnchorID(c.Raw), Subject: c.Subject.String(), Issuer: c.Issuer.String(), IsCA: c.IsCA,
		NotBefore: c.NotBefore.UTC(), NotAfter: c.NotAfter.UTC()}
}

// countHolders fills each anchor's HeldBy from what the agents observed cluster-wide,
// or says why it could not.
func (o *options) countHolders(ctx context.Context, in *Inspected) {
	c, err := o.cluster(ctx, "")
	if err == nil {
		c.Contents, err = o.contents(ctx, "")
	}
	if err != nil {
		in.HoldersNotRead = strings.SplitN(err.Error(), "\n", 2)[0]
		return
	}
	for i := range in.Keys {
		for j := range in.Keys[i].Anchors {
			a := &in.Keys[i].Anchors[j]
			n := len(c.WhoTrusts(a.SHA256, "")) + len(c.ObjectsHolding(a.SHA256, ""))
			a.HeldBy = &n
		}
	}
}

// readErr adds to a Forbidden the right the read takes.
func readErr(err error, right string) error {
	if apierrors.IsForbidden(err) {
		return fmt.Errorf("%w\ninspect reads the object with your own credentials: it needs %s in its namespace", err, right)
	}
	return err
}
