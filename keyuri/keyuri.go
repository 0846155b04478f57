// Package keyuri reads a signer's keyRef: where its CA keys live when not in the CA
// Secret. Two keepers are named: a PKCS#11 token (an RFC 7512 URI) and AWS KMS. The
// package only parses and checks; signer/keeper opens what it names.
//
// The parser is written here, not taken from go.step.sm/crypto/kms/uri (which the
// keeper uses to talk to the token), because trustsync refuses what that parser
// accepts: a PIN in the URI (it would sit in a ConfigMap), unknown attributes (a typo
// would name another token or key), and a URI that names no token or no key.
package keyuri

import (
	"encoding/hex"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"
)

// Keepers, as a keyRef's scheme names them; KeeperSecret is a keyRef left out.
const (
	KeeperSecret = "secret"
	KeeperPKCS11 = "pkcs11"
	KeeperAWSKMS = "awskms"
)

// Ref is a parsed keyRef.
type Ref struct {
	// Keeper is KeeperPKCS11 or KeeperAWSKMS.
	Keeper string

	// PKCS#11: the token (by label), the key object (label, id or both), the module
	// to load, and the file holding the user PIN.
	Token, Object string
	ID            []byte
	ModulePath    string
	PINSource     string

	// AWS KMS: the key, by id, ARN or alias (alias/NAME); the region; and, for tests
	// against a local implementation, the endpoint.
	KeyID, Region, Endpoint string
}

var (
	pkcs11Path  = []string{"token", "object", "id"}
	pkcs11Query = []string{"module-path", "pin-source"}
	awskmsAttrs = []string{"key-id", "region", "endpoint"}
	// aliasName is AWS KMS's rule for an alias's name.
	aliasName = regexp.MustCompile(`^alias/[a-zA-Z0-9/_-]{1,250}$`)
)

// Parse reads a keyRef: pkcs11:token=T;object=O?module-path=M&pin-source=F, or
// awskms:key-id=K;region=R. Each error names the offending part and how to write it.
func Parse(s string) (*Ref, error) {
	scheme, rest, ok := strings.Cut(s, ":")
	switch {
	case !ok:
		return nil, fmt.Errorf("keyRef %q names no keeper: write pkcs11:token=LABEL;object=LABEL?module-path=PATH&pin-source=FILE (RFC 7512) or awskms:key-id=KEY;region=REGION", s)
	case scheme == KeeperPKCS11:
		return parsePKCS11(s, rest)
	case scheme == KeeperAWSKMS:
		return parseAWSKMS(s, rest)
	}
	return nil, fmt.Errorf("keyRef %q: keeper %q is not known: write pkcs11:token=LABEL;object=LABEL?module-path=PATH&pin-source=FILE (RFC 7512) or awskms:key-id=KEY;region=REGION", s, scheme)
}

func parsePKCS11(s, rest string) (*Ref, error) {
	pathPart, queryPart, _ := strings.Cut(rest, "?")
	path, err := attributes(s, pathPart, ";", pkcs11Path, "path")
	if err != nil {
		return nil, err
	}
	query, err := attributes(s, queryPart, "&", pkcs11Query, "query")
	if err != nil {
		return nil, err
	}
	r := &Ref{Keeper: KeeperPKCS11, Token: path["token"], Object: path["object"], ModulePath: query["module-path"], PINSource: query["pin-source"]}
	if id, ok := path["id"]; ok {
		if id == "" {
			return nil, fmt.Errorf("keyRef %q: id is empty: give the key's CKA_ID as percent-encoded bytes (id=%%01%%02) or leave id out and name the object", s)
		}
		r.ID = []byte(id)
	}
	switch {
	case r.Token == "":
		return nil, fmt.Errorf("keyRef %q names no token: add token=LABEL (the token's label, as softhsm2-util --show-slots or pkcs11-tool -L prints it)", s)
	case r.Object == "" && r.ID == nil:
		return nil, fmt.Errorf("keyRef %q names no key: add object=LABEL (the key's label; it is made if missing) or id=BYTES", s)
	case r.ModulePath == "":
		return nil, fmt.Errorf("keyRef %q names no module: add ?module-path=/path/to/the/vendor/module.so", s)
	case r.PINSource == "":
		return nil, fmt.Errorf("keyRef %q names no PIN file: add pin-source=/path/to/pin (a mounted Secret's file); a PIN is never read from the URI", s)
	}
	return r, nil
}

func parseAWSKMS(s, rest string) (*Ref, error) {
	attrs, err := attributes(s, rest, ";", awskmsAttrs, "")
	if err != nil {
		return nil, err
	}
	r := &Ref{Keeper: KeeperAWSKMS, KeyID: attrs["key-id"], Region: attrs["region"], Endpoint: attrs["endpoint"]}
	switch {
	case r.KeyID == "":
		return nil, fmt.Errorf("keyRef %q names no key: add key-id=alias/NAME (the key is made with that alias if missing), a key id or an ARN", s)
	case strings.HasPrefix(r.KeyID, "alias/") && !aliasName.MatchString(r.KeyID):
		return nil, fmt.Errorf("keyRef %q: key-id %q is not an alias AWS KMS accepts: alias/ then letters, digits, /, _ and -", s, r.KeyID)
	case r.Region == "":
		return nil, fmt.Errorf("keyRef %q names no region: add region=REGION (us-east-1, say)", s)
	}
	if r.Endpoint != "" {
		if u, err := url.Parse(r.Endpoint); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return nil, fmt.Errorf("keyRef %q: endpoint %q is not an http(s) URL", s, r.Endpoint)
		}
	}
	return r, nil
}

// attributes splits part into name=value pairs (values percent-decoded), refusing a
// name not in known, a name given twice, and pin-value wherever it is.
func attributes(s, part, sep string, known []string, where string) (map[string]string, error) {
	out := map[string]string{}
	if part == "" {
		return out, nil
	}
	for _, kv := range strings.Split(part, sep) {
		name, raw, ok := strings.Cut(kv, "=")
		if name == "pin-value" {
			// The keyRef is not quoted: it would put the PIN in a log.
			return nil, fmt.Errorf("a keyRef carries a PIN (pin-value): the policy file is a ConfigMap anyone who reads it sees; put the PIN in a Secret, mount it, and name its file with pin-source")
		}
		if !ok {
			return nil, fmt.Errorf("keyRef %q: %q is not name=value", s, kv)
		}
		if !slices.Contains(known, name) {
			in := ""
			if where != "" {
				in = " in the " + where
			}
			return nil, fmt.Errorf("keyRef %q: attribute %q is not one trustsync reads%s; it reads %s", s, name, in, strings.Join(known, ", "))
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("keyRef %q gives %s twice", s, name)
		}
		v, err := url.PathUnescape(raw)
		if err != nil {
			return nil, fmt.Errorf("keyRef %q: %s=%q is not percent-encoded correctly: %v", s, name, raw, err)
		}
		out[name] = v
	}
	return out, nil
}

// Key is one key in the keeper: what the CA Secret records, without the module, PIN
// file, region or endpoint, which come from the signer's keyRef.
func (r *Ref) Key() string {
	switch r.Keeper {
	case KeeperPKCS11:
		return "pkcs11:" + strings.Join(r.pkcs11Path(), ";")
	case KeeperAWSKMS:
		return "awskms:key-id=" + escape(r.KeyID)
	}
	return ""
}

// String is the whole keyRef, as the policy file writes it (it never holds a PIN).
func (r *Ref) String() string {
	switch r.Keeper {
	case KeeperPKCS11:
		return r.Key() + "?module-path=" + escape(r.ModulePath) + "&pin-source=" + escape(r.PINSource)
	case KeeperAWSKMS:
		s := r.Key() + ";region=" + escape(r.Region)
		if r.Endpoint != "" {
			s += ";endpoint=" + escape(r.Endpoint)
		}
		return s
	}
	return ""
}

func (r *Ref) pkcs11Path() []string {
	p := []string{"token=" + escape(r.Token)}
	if r.ID != nil {
		p = append(p, "id="+escapeBytes(r.ID))
	}
	if r.Object != "" {
		p = append(p, "object="+escape(r.Object))
	}
	return p
}

// WithKey is r naming another key of the same keeper: a key the CA Secret recorded,
// read with the module and PIN (or region and endpoint) of the signer's keyRef. A
// key in another token or keeper is refused: the keyRef names where the signer's keys
// live, and the Secret may not send it elsewhere.
func (r *Ref) WithKey(key string) (*Ref, error) {
	scheme, rest, _ := strings.Cut(key, ":")
	if scheme != r.Keeper {
		return nil, fmt.Errorf("key %q is not in the %s keeper the keyRef names (%s); a CA Secret cannot move its key to another keeper", key, r.Keeper, r.Key())
	}
	out := *r
	switch r.Keeper {
	case KeeperPKCS11:
		path, err := attributes(key, rest, ";", pkcs11Path, "path")
		if err != nil {
			return nil, err
		}
		if path["token"] != r.Token {
			return nil, fmt.Errorf("key %q is in token %q, not in token %q that the keyRef names; a CA Secret cannot move its key to another token", key, path["token"], r.Token)
		}
		out.Object, out.ID = path["object"], nil
		if id, ok := path["id"]; ok && id != "" {
			out.ID = []byte(id)
		}
		if out.Object == "" && out.ID == nil {
			return nil, fmt.Errorf("key %q names no object or id", key)
		}
	case KeeperAWSKMS:
		a, err := attributes(key, rest, ";", []string{"key-id"}, "")
		if err != nil {
			return nil, err
		}
		if out.KeyID = a["key-id"]; out.KeyID == "" {
			return nil, fmt.Errorf("key %q names no key-id", key)
		}
	}
	return &out, nil
}

// escape percent-encodes what RFC 7512 reserves in an attribute value.
func escape(v string) string {
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("-._~/:", c) >= 0 {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "%%%02X", c)
	}
	return b.String()
}

func escapeBytes(id []byte) string {
	h := hex.EncodeToString(id)
	var b strings.Builder
	for i := 0; i < len(h); i += 2 {
		b.WriteString("%" + h[i:i+2])
	}
	return b.String()
}
