package query

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"

	"github.com/trustsync/trustsync/bundle"
)

var hexPrefix = regexp.MustCompile(`^[0-9a-fA-F:]+$`)

// MinPrefix is the shortest anchor prefix taken: 12 hex digits, 48 bits.
const MinPrefix = 12

// CheckAnchorArg says whether arg can name an anchor at all (a readable PEM file of
// certificates, or a SHA-256 in hex or a long enough prefix of one), so that a
// mistyped argument is refused before anything is read from the cluster.
func CheckAnchorArg(arg string) error {
	if data, err := os.ReadFile(arg); err == nil {
		ids, err := bundle.AnchorIDs(data)
		if err != nil {
			return fmt.Errorf("%s is not a PEM file of certificates: %w", arg, err)
		}
		if len(ids) == 0 {
			return fmt.Errorf("%s holds no certificate", arg)
		}
		return nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if !hexPrefix.MatchString(arg) {
		return fmt.Errorf("%q is neither a file nor a SHA-256 in hex: give a PEM file, or the anchor's SHA-256 (openssl x509 -noout -fingerprint -sha256), or at least %d of its first hex digits", arg, MinPrefix)
	}
	prefix := strings.ReplaceAll(arg, ":", "")
	switch {
	case len(prefix) > 64:
		return fmt.Errorf("%q has %d hex digits; a SHA-256 has 64", arg, len(prefix))
	case len(prefix) < MinPrefix:
		return fmt.Errorf("%q is too short a prefix: give at least %d hex digits", arg, MinPrefix)
	}
	return nil
}

// ResolveAnchor turns what the user gave into anchor IDs: a PEM file's certificates,
// or a SHA-256 in hex (colons allowed, as openssl prints it), or a prefix of at least
// MinPrefix digits that names one anchor among those the reports and bundles know.
func (c Cluster) ResolveAnchor(arg string) ([]string, error) {
	if err := CheckAnchorArg(arg); err != nil {
		return nil, err
	}
	if data, err := os.ReadFile(arg); err == nil {
		return bundle.AnchorIDs(data)
	}
	prefix := strings.ToLower(strings.ReplaceAll(arg, ":", ""))
	if len(prefix) == 64 {
		return []string{prefix}, nil
	}
	var found []string
	for _, id := range c.knownAnchors() {
		if strings.HasPrefix(id, prefix) && !slices.Contains(found, id) {
			found = append(found, id)
		}
	}
	switch len(found) {
	case 0:
		return nil, fmt.Errorf("no anchor held by a pod or in a bundle starts with %s", prefix)
	case 1:
		return found, nil
	}
	return nil, fmt.Errorf("prefix %s names %d anchors (%s); give more digits", prefix, len(found), strings.Join(found, ", "))
}

func (c Cluster) knownAnchors() []string {
	var ids []string
	for _, r := range c.Reports {
		for _, s := range r.AnchorSets {
			ids = append(ids, s.Anchors...)
		}
	}
	for _, b := range c.Bundles {
		more, _ := bundle.AnchorIDs([]byte(b.Spec.TrustBundle))
		ids = append(ids, more...)
	}
	for _, o := range c.Contents {
		ids = append(ids, o.Anchors...)
	}
	slices.Sort(ids)
	return slices.Compact(ids)
}
