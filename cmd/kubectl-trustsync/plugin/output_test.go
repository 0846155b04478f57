package plugin

import (
	"bytes"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/trustsync/trustsync/api/v1alpha1"
)

// -o name prints what kubectl get -o name would: KIND[.GROUP]/NAME, the namespace left
// out, each object once (a pod of one name in two namespaces is two objects).
func TestPrintNames_AsKubectlGetPrintsThem(t *testing.T) {
	var out bytes.Buffer
	o := &options{output: outputName, stdout: &out}
	printed, err := o.printNames([]object{
		{kind: podKind, namespace: "a", name: "web"},
		{kind: podKind, namespace: "b", name: "web"},
		{kind: podKind, namespace: "a", name: "web"},
		{kind: kindOf("ConfigMap"), namespace: "a", name: "roots"},
		{kind: kindOf("ValidatingWebhookConfiguration"), name: "hook"},
		{kind: v1alpha1.GroupVersion.WithKind(v1alpha1.FederatedTrustDomainKind), name: "peer"},
	})
	want := "pod/web\npod/web\nconfigmap/roots\nvalidatingwebhookconfiguration.admissionregistration.k8s.io/hook\nfederatedtrustdomain.trustsync.io/peer\n"
	if !printed || err != nil || out.String() != want {
		t.Errorf("printed %v, %v:\n%s\nwant\n%s", printed, err, out.String(), want)
	}
	out.Reset()
	o.output = outputTable
	if printed, _ := o.printNames([]object{{kind: schema.GroupVersionKind{Version: "v1", Kind: "Pod"}, name: "web"}}); printed || out.Len() > 0 {
		t.Errorf("without -o name, printNames printed %q", out.String())
	}
}
