package injector

import (
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/trustsync/trustsync/api/v1alpha1"
	"github.com/trustsync/trustsync/bundle"
	"github.com/trustsync/trustsync/delivery/contract"
	"github.com/trustsync/trustsync/policy"
)

// Prefix starts every annotation trustsync reads or writes.
const Prefix = "trustsync.io/"

// knownAnnotations are every key trustsync reads, each added by annotation as it is
// declared (those every reader of pods shares are declared by api/v1alpha1); any other trustsync.io/ key on a pod or its namespace is most likely a
// typo, and earns a warning.
var knownAnnotations = []string{v1alpha1.AnnotationInject, v1alpha1.AnnotationStatus}

// annotation declares a key trustsync reads.
// Deliveries are the values trustsync.io/delivery takes, the default first: how trust
// reaches a pod's files.
var Deliveries = []v1alpha1.Delivery{v1alpha1.DeliverySidecar, v1alpha1.DeliveryNative, v1alpha1.DeliveryNode}

func annotation(name string) string {
	knownAnnotations = append(knownAnnotations, Prefix+name)
	return Prefix + name
}

// The annotations a pod (or, as defaults, its namespace) asks for trust with.
var (
	AnnotationSignerName    = annotation("signer-name")
	AnnotationLabelSelector = annotation("label-selector")
	AnnotationBundleName    = annotation("bundle-name")
	AnnotationPath          = annotation("path")
	AnnotationOptional      = annotation("optional")
	AnnotationSources       = annotation("sources")
	// AnnotationBundles is AnnotationSources' former name, still read: pods and
	// namespaces written before the rename carry it.
	AnnotationBundles       = annotation("bundles")
	AnnotationMountPath     = annotation("mount-path")
	AnnotationContainers    = annotation("containers")
	AnnotationSSLCertFile   = annotation("ssl-cert-file")
	AnnotationSidecarMode   = annotation("sidecar-mode")
	AnnotationCPURequest    = annotation("sidecar-cpu-request")
	AnnotationMemoryRequest = annotation("sidecar-memory-request")
	AnnotationMemoryLimit   = annotation("sidecar-memory-limit")
	AnnotationVolumeSize    = annotation("volume-size-limit")

	AnnotationCertificate                 = annotation("certificate")
	AnnotationCertificateSigner           = annotation("certificate-signer")
	AnnotationCertificateExpiration       = annotation("certificate-expiration-seconds")
	AnnotationCertificateDNSNames         = annotation("certificate-dns-names")
	AnnotationCertificateKeyType          = annotation("certificate-key-type")
	AnnotationCertificateCredentialBundle = annotation("certificate-credential-bundle")

	AnnotationFormat          = annotation("format")
	AnnotationPasswordSecret  = annotation("password-secret")
	AnnotationPKCS12Profile   = annotation("pkcs12-profile")
	AnnotationReloadURL       = annotation("reload-url")
	AnnotationReloadSignal    = annotation("reload-signal")
	AnnotationReloadContainer = annotation("reload-container")
	AnnotationReloadSettle    = annotation("reload-settle")
)

const (
	DefaultMountPath = "/var/run/trust-anchors"
	DefaultPath      = "ca_certificates.pem"
)

// unknownAnnotationWarnings names each trustsync.io/ key that trustsync does not read,
// with the known key it most resembles, so a typo in an optional key (which would
// otherwise silently take the default) is seen at admission.
func unknownAnnotationWarnings(sets ...map[string]string) []string {
	var out []string
	seen := map[string]bool{}
	for _, annotations := range sets {
		keys := make([]string, 0, len(annotations))
		for k := range annotations {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			if !strings.HasPrefix(k, Prefix) || slices.Contains(knownAnnotations, k) || seen[k] {
				continue
			}
			seen[k] = true
			msg := fmt.Sprintf("trustsync: annotation %q is not one trustsync reads and is ignored", k)
			if near, d := nearest(k, knownAnnotations); d <= 3 {
				msg += fmt.Sprintf("; did you mean %q?", near)
			}
			out = append(out, msg)
		}
	}
	return out
}

// nearest returns the candidate with the least edit distance to s, and the distance.
func nearest(s string, candidates []string) (string, int) {
	best, bestD := "", -1
	for _, c := range candidates {
		if d := editDistance(s, c); bestD < 0 || d < bestD {
			best, bestD = c, d
		}
	}
	return best, bestD
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

// sidecarMountPaths are the sidecar's own mounts besides the trust volume.
var sidecarMountPaths = map[string]string{
	stateMountPath: "its state directory (a pending key)",
	tokenMountPath: "the ServiceAccount token",
}

// sourceAnnotations pick the sources; a pod that sets any of them takes none of its
// namespace's, so a namespace default never mixes into a pod's own choice.
var sourceAnnotations = []string{AnnotationSignerName, AnnotationLabelSelector, AnnotationBundleName, AnnotationSources, AnnotationBundles}

// effectiveAnnotations merges a namespace's default annotations under the pod's own:
// the pod wins key by key, except that source annotations come as a group from
// whichever of the two sets any. inject and status are never taken from a namespace.
func effectiveAnnotations(pod, namespace map[string]string) map[string]string {
	out := map[string]string{}
	podSetsSource := slices.ContainsFunc(sourceAnnotations, func(k string) bool { _, ok := pod[k]; return ok })
	for k, v := range namespace {
		if !strings.HasPrefix(k, Prefix) || k == v1alpha1.AnnotationInject || k == v1alpha1.AnnotationStatus {
			continue
		}
		if podSetsSource && slices.Contains(sourceAnnotations, k) {
			continue
		}
		out[k] = v
	}
	for k, v := range pod {
		if strings.HasPrefix(k, Prefix) {
			out[k] = v
		}
	}
	return out
}

// request is what the annotations ask for, parsed and checked.
type request struct {
	delivery        v1alpha1.Delivery
	sources         []v1alpha1.Source
	mountPath       string
	containers      []string // nil: every app container
	sslCertFile     string   // relative to the volume; "" for none
	sslCertFileRaw  string   // the annotation as written, for messages
	mode            v1alpha1.Mode
	resources       resources
	volumeSizeLimit resource.Quantity
	certificate     *certificateRequest
	reload          *contract.Reload
}

type resources struct {
	cpuRequest, memoryRequest, memoryLimit resource.Quantity
}

type certificateRequest struct {
	signer            string
	expirationSeconds int32 // 0: the signer's default
	dnsNames          []string
	keyType           string
	credentialBundle  bool
}

// annotationParser reads annotations, collecting an error per bad one.
type annotationParser struct {
	a    map[string]string
	errs field.ErrorList
}

func annotationPath(key string) *field.Path {
	return field.NewPath("metadata", "annotations").Key(key)
}

func (p *annotationParser) invalid(key, msg string) {
	p.errs = append(p.errs, field.Invalid(annotationPath(key), p.a[key], msg))
}

func (p *annotationParser) bool(key string, def bool) bool {
	v, ok := p.a[key]
	if !ok {
		return def
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		p.invalid(key, `must be "true" or "false"`)
	}
	return b
}

func (p *annotationParser) quantity(key string, def string) resource.Quantity {
	v, ok := p.a[key]
	if !ok {
		return resource.MustParse(def)
	}
	q, err := resource.ParseQuantity(v)
	if err != nil || q.Sign() <= 0 {
		p.invalid(key, "must be a positive quantity such as 16Mi or 50m")
	}
	return q
}

func (p *annotationParser) choice(key, def string, allowed []string) string {
	v, ok := p.a[key]
	if !ok {
		return def
	}
	if !slices.Contains(allowed, v) {
		p.errs = append(p.errs, field.NotSupported(annotationPath(key), v, allowed))
	}
	return v
}

// parseRequest reads every annotation the injector knows from the effective set.
func parseRequest(a map[string]string, cfg Config) (*request, field.ErrorList) {
	p := &annotationParser{a: a}
	r := &request{
		mountPath: DefaultMountPath,
		mode:      v1alpha1.Mode(p.choice(AnnotationSidecarMode, string(cfg.defaultMode()), []string{string(v1alpha1.ModeRestartableInit), string(v1alpha1.ModeLegacy)})),
		resources: resources{
			cpuRequest:    p.quantity(AnnotationCPURequest, "10m"),
			memoryRequest: p.quantity(AnnotationMemoryRequest, "24Mi"),
			memoryLimit:   p.quantity(AnnotationMemoryLimit, "64Mi"),
		},
		volumeSizeLimit: p.quantity(AnnotationVolumeSize, "16Mi"),
	}
	if r.resources.memoryRequest.Cmp(r.resources.memoryLimit) > 0 {
		p.invalid(AnnotationMemoryRequest, fmt.Sprintf("must not exceed the memory limit %s", r.resources.memoryLimit.String()))
	}
	if v, ok := a[AnnotationMountPath]; ok {
		if !path.IsAbs(v) || path.Clean(v) != v || strings.Contains(v, ":") || v == "/" {
			p.invalid(AnnotationMountPath, "must be a clean absolute path other than / without ':', such as /var/run/trust-anchors")
		}
		// The sidecar mounts these itself; the API server would refuse the pod for a
		// duplicate mount path without naming the annotation that caused it.
		if what, reserved := sidecarMountPaths[v]; reserved {
			p.invalid(AnnotationMountPath, fmt.Sprintf("is where the sidecar mounts %s; choose another path, such as %s", what, DefaultMountPath))
		}
		r.mountPath = v
	}
	if v, ok := a[AnnotationContainers]; ok {
		r.containers = splitList(v)
		if len(r.containers) == 0 {
			p.invalid(AnnotationContainers, "must list at least one container name, separated by commas")
		}
	}
	var deliveries []string
	for _, d := range Deliveries {
		deliveries = append(deliveries, string(d))
	}
	r.delivery = v1alpha1.Delivery(p.choice(AnnotationDelivery, string(v1alpha1.DeliverySidecar), deliveries))
	r.certificate = p.certificate(r.delivery)
	r.sources = p.sources(r.certificate != nil)
	r.sslCertFile, r.sslCertFileRaw = p.sslCertFile(r.sources), a[AnnotationSSLCertFile]
	r.reload = p.reload()
	switch r.delivery {
	case v1alpha1.DeliveryNative:
		p.errs = append(p.errs, checkNative(a, r, cfg)...)
	case v1alpha1.DeliveryNode:
		p.errs = append(p.errs, checkNode(a, cfg)...)
	}
	return r, p.errs
}

// listKey is the annotation holding the JSON sources list: trustsync.io/sources, or
// its former name trustsync.io/bundles; "" when neither is set.
func listKey(a map[string]string) string {
	for _, key := range []string{AnnotationSources, AnnotationBundles} {
		if _, ok := a[key]; ok {
			return key
		}
	}
	return ""
}

// sources reads either the JSON list or the one-item shorthand.
func (p *annotationParser) sources(certificateRequested bool) []v1alpha1.Source {
	list := listKey(p.a)
	hasList := list != ""
	_, hasSigner := p.a[AnnotationSignerName]
	_, hasName := p.a[AnnotationBundleName]
	if _, former := p.a[AnnotationBundles]; former && list == AnnotationSources {
		p.invalid(AnnotationBundles, fmt.Sprintf("is the former name of %s; set %s alone", AnnotationSources, AnnotationSources))
		return nil
	}
	switch {
	case hasList && (hasSigner || hasName):
		p.invalid(list, fmt.Sprintf("use either %s or the one-item annotations (%s, %s), not both", list, AnnotationSignerName, AnnotationBundleName))
		return nil
	case hasList:
		for _, key := range []string{AnnotationFormat, AnnotationPasswordSecret, AnnotationPKCS12Profile} {
			if _, ok := p.a[key]; ok {
				p.invalid(key, fmt.Sprintf("goes with the one-item annotations; with %s give each item its \"format\", \"passwordSecret\" and \"pkcs12Profile\"", list))
			}
		}
		sources, err := v1alpha1.ParseSources([]byte(p.a[list]))
		if err != nil {
			p.invalid(list, err.Error())
		}
		return sources
	case hasSigner || hasName:
		return p.shorthand()
	case certificateRequested:
		return nil
	default:
		p.errs = append(p.errs, field.Required(annotationPath(v1alpha1.AnnotationInject),
			fmt.Sprintf("trust was asked for but no source is named: set %s, %s or %s (or %s: \"true\")", AnnotationSignerName, AnnotationBundleName, AnnotationSources, AnnotationCertificate)))
		return nil
	}
}

// shorthand builds the one item the single-source annotations describe. Unlike the
// JSON form, a signer without a label selector means all of that signer's bundles.
func (p *annotationParser) shorthand() []v1alpha1.Source {
	if _, both := p.a[AnnotationBundleName]; both && p.a[AnnotationSignerName] != "" {
		p.invalid(AnnotationBundleName, fmt.Sprintf("set either %s or %s, not both", AnnotationSignerName, AnnotationBundleName))
		return nil
	}
	s := v1alpha1.Source{
		Name:       p.a[AnnotationBundleName],
		SignerName: p.a[AnnotationSignerName],
		Path:       DefaultPath,
		Optional:   p.bool(AnnotationOptional, false),
		Format:     p.choice(AnnotationFormat, "", v1alpha1.Formats),
	}
	if _, ok := p.a[AnnotationPKCS12Profile]; ok {
		s.PKCS12Profile = p.choice(AnnotationPKCS12Profile, "", v1alpha1.PKCS12Profiles)
	}
	if v, ok := p.a[AnnotationPasswordSecret]; ok {
		name, key, found := strings.Cut(v, "/")
		if !found {
			p.invalid(AnnotationPasswordSecret, "must be <secret name>/<key>, such as truststore-password/password: the key of a Secret in the pod's namespace that holds the password")
		} else {
			s.PasswordSecret = &v1alpha1.KeyRef{Name: name, Key: key}
		}
	}
	if v, ok := p.a[AnnotationPath]; ok {
		s.Path = v
	}
	if s.SignerName != "" {
		s.LabelSelector = &metav1.LabelSelector{}
		if v, ok := p.a[AnnotationLabelSelector]; ok {
			sel, err := parseLabelSelector(v)
			if err != nil {
				p.invalid(AnnotationLabelSelector, fmt.Sprintf("must be a label selector in kubectl syntax, such as kubernetes.io/cluster-trust-bundle-version=live: %v", err))
				return nil
			}
			s.LabelSelector = sel
		}
	} else if _, ok := p.a[AnnotationLabelSelector]; ok {
		p.invalid(AnnotationLabelSelector, fmt.Sprintf("goes with %s only", AnnotationSignerName))
	}
	// Report each error on the annotation that holds the offending value.
	for _, e := range s.Validate(field.NewPath("source")) {
		key := AnnotationSignerName
		switch f := strings.TrimPrefix(e.Field, "source."); {
		case (f == "format" || f == "pkcs12Profile") && e.Type == field.ErrorTypeNotSupported:
			continue // reported by choice above
		case f == "format":
			key = AnnotationFormat
		case f == "pkcs12Profile":
			key = AnnotationPKCS12Profile
		case strings.HasPrefix(f, "name"):
			key = AnnotationBundleName
		case strings.HasPrefix(f, "path"):
			key = AnnotationPath
		case strings.HasPrefix(f, "labelSelector"):
			key = AnnotationLabelSelector
		case strings.HasPrefix(f, "passwordSecret"):
			key = AnnotationPasswordSecret
		}
		p.errs = append(p.errs, &field.Error{Type: e.Type, Field: annotationPath(key).String(), BadValue: p.a[key], Detail: e.Detail})
	}
	return []v1alpha1.Source{s}
}

// sslCertFile resolves trustsync.io/ssl-cert-file to a file in the volume.
func (p *annotationParser) sslCertFile(sources []v1alpha1.Source) string {
	v, ok := p.a[AnnotationSSLCertFile]
	if !ok || v == "false" {
		return ""
	}
	// SSL_CERT_FILE is read as PEM by every library that reads it.
	var paths []string
	for _, s := range sources {
		if !slices.Contains(paths, s.Path) && s.FileFormat() == v1alpha1.FormatPEM {
			paths = append(paths, s.Path)
		}
	}
	if v == "true" {
		if len(paths) == 0 {
			p.invalid(AnnotationSSLCertFile, "there is no PEM trust file to point at: name a source (a truststore will not do: SSL_CERT_FILE is read as PEM)")
			return ""
		}
		return paths[0]
	}
	if !slices.Contains(paths, v) {
		p.invalid(AnnotationSSLCertFile, fmt.Sprintf(`must be "true", "false" or one of the PEM files the sources write: %s`, strings.Join(paths, ", ")))
	}
	return v
}

func (p *annotationParser) certificate(delivery v1alpha1.Delivery) *certificateRequest {
	if !p.bool(AnnotationCertificate, false) {
		return nil
	}
	c := &certificateRequest{
		signer:           policy.DefaultSignerName,
		keyType:          p.keyType(delivery),
		credentialBundle: p.bool(AnnotationCertificateCredentialBundle, false),
	}
	if v, ok := p.a[AnnotationCertificateSigner]; ok {
		p.errs = append(p.errs, bundle.ValidateSignerName(annotationPath(AnnotationCertificateSigner), v)...)
		c.signer = v
	}
	if v, ok := p.a[AnnotationCertificateExpiration]; ok {
		n, err := strconv.ParseInt(v, 10, 32)
		if err != nil || n < policy.MinimumExpirationSeconds {
			p.invalid(AnnotationCertificateExpiration, fmt.Sprintf("must be a whole number of seconds, at least %d (10 minutes)", policy.MinimumExpirationSeconds))
		}
		c.expirationSeconds = int32(n)
	}
	if v, ok := p.a[AnnotationCertificateDNSNames]; ok {
		c.dnsNames = splitList(v)
		for _, name := range c.dnsNames {
			if msgs := validation.IsDNS1123Subdomain(strings.TrimPrefix(name, "*.")); len(msgs) > 0 {
				p.invalid(AnnotationCertificateDNSNames, fmt.Sprintf("%q is not a DNS name: %s", name, strings.Join(msgs, "; ")))
			}
		}
	}
	return c
}

// keyType reads the certificate's key type, checked against what the delivery makes:
// the sidecar and the kubelet's podCertificate volume each make a type the other
// does not, so a type of the other delivery is named as such.
func (p *annotationParser) keyType(delivery v1alpha1.Delivery) string {
	v, ok := p.a[AnnotationCertificateKeyType]
	if !ok {
		return contract.DefaultKeyType
	}
	makes, other := contract.KeyTypes, nativeKeyTypes
	what, otherWhat := "the sidecar generates", "a podCertificate volume's alone ("+AnnotationDelivery+": native)"
	if delivery == v1alpha1.DeliveryNative {
		makes, other = nativeKeyTypes, contract.KeyTypes
		what, otherWhat = "a podCertificate volume takes", "the sidecar's alone"
	}
	switch {
	case slices.Contains(makes, v):
	case slices.Contains(other, v):
		p.invalid(AnnotationCertificateKeyType, fmt.Sprintf("with %s: %s, %s %s; %s is %s", AnnotationDelivery, delivery, what, strings.Join(makes, ", "), v, otherWhat))
	default:
		p.errs = append(p.errs, field.NotSupported(annotationPath(AnnotationCertificateKeyType), v, makes))
	}
	return v
}

// reload reads how the app is told of a change; nil when it is not.
func (p *annotationParser) reload() *contract.Reload {
	r := &contract.Reload{URL: p.a[AnnotationReloadURL], Signal: p.a[AnnotationReloadSignal], Container: p.a[AnnotationReloadContainer]}
	if _, ok := p.a[AnnotationReloadURL]; ok {
		if err := contract.ValidateReloadURL(r.URL); err != nil {
			p.invalid(AnnotationReloadURL, err.Error())
		}
	}
	if _, ok := p.a[AnnotationReloadSignal]; ok && !slices.Contains(contract.ReloadSignals, r.Signal) {
		p.errs = append(p.errs, field.NotSupported(annotationPath(AnnotationReloadSignal), r.Signal, contract.ReloadSignals))
	}
	if _, ok := p.a[AnnotationReloadContainer]; ok && r.Signal == "" {
		p.invalid(AnnotationReloadContainer, fmt.Sprintf("names the container that gets %s; set that too, or remove this", AnnotationReloadSignal))
	}
	r.Settle = contract.DefaultReloadSettle
	if v, ok := p.a[AnnotationReloadSettle]; ok {
		d, err := time.ParseDuration(v)
		switch {
		case err != nil || d < 0 || d > contract.ReloadMaxDelay:
			p.invalid(AnnotationReloadSettle, fmt.Sprintf("must be a duration from 0s to %s, such as 500ms: the first change after this long without a reload is told at once, and changes within it of a reload together once they stop", contract.ReloadMaxDelay))
		case r.URL == "" && r.Signal == "":
			p.invalid(AnnotationReloadSettle, fmt.Sprintf("paces the reloads %s or %s asks for; set one, or remove this", AnnotationReloadURL, AnnotationReloadSignal))
		default:
			r.Settle = d
		}
	}
	if r.URL == "" && r.Signal == "" {
		return nil
	}
	return r
}

func splitList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// parseLabelSelector reads a selector in kubectl's syntax. apimachinery's
// ParseToLabelSelector refuses "!=", which kubectl takes: key!=value is read as
// key notin (value), which matches the same labels (those without the key too).
func parseLabelSelector(v string) (*metav1.LabelSelector, error) {
	parsed, err := labels.Parse(v)
	if err != nil {
		return nil, err
	}
	reqs, _ := parsed.Requirements()
	sel := &metav1.LabelSelector{}
	for _, r := range reqs {
		values := r.Values().List()
		switch r.Operator() {
		case selection.Equals, selection.DoubleEquals:
			if sel.MatchLabels == nil {
				sel.MatchLabels = map[string]string{}
			}
			sel.MatchLabels[r.Key()] = values[0]
		case selection.NotEquals:
			sel.MatchExpressions = append(sel.MatchExpressions, metav1.LabelSelectorRequirement{Key: r.Key(), Operator: metav1.LabelSelectorOpNotIn, Values: values})
		case selection.In:
			sel.MatchExpressions = append(sel.MatchExpressions, metav1.LabelSelectorRequirement{Key: r.Key(), Operator: metav1.LabelSelectorOpIn, Values: values})
		case selection.NotIn:
			sel.MatchExpressions = append(sel.MatchExpressions, metav1.LabelSelectorRequirement{Key: r.Key(), Operator: metav1.LabelSelectorOpNotIn, Values: values})
		case selection.Exists:
			sel.MatchExpressions = append(sel.MatchExpressions, metav1.LabelSelectorRequirement{Key: r.Key(), Operator: metav1.LabelSelectorOpExists})
		case selection.DoesNotExist:
			sel.MatchExpressions = append(sel.MatchExpressions, metav1.LabelSelectorRequirement{Key: r.Key(), Operator: metav1.LabelSelectorOpDoesNotExist})
		default:
			return nil, fmt.Errorf("%q is not an operator a label selector may use", r.Operator())
		}
	}
	return sel, nil
}
