package v1alpha1

import (
	"fmt"
	"strings"
	"testing"
)

func injectedObject(i int) InjectedObject {
	return InjectedObject{Kind: KindConfigMap, Namespace: fmt.Sprintf("ns-%05d", i), Name: "trust", Sources: []Source{{Name: "corp", Path: "ca.pem"}},
		Anchors: []string{strings.Repeat("a", 64), strings.Repeat("b", 64)}}
}

func TestInjectedIndex_EncodesInOneOrderAndReadsBack(t *testing.T) {
	a, b := injectedObject(2), injectedObject(1)
	one, _ := EncodeInjectedIndex([]InjectedObject{a, b})
	other, omitted := EncodeInjectedIndex([]InjectedObject{b, a})
	if one != other || omitted != 0 {
		t.Fatalf("the same objects in another order encode differently (%d omitted):\n%s\n%s", omitted, one, other)
	}
	idx, err := ParseInjectedIndex(one)
	if err != nil {
		t.Fatal(err)
	}
	if len(idx.Objects) != 2 || idx.Objects[0].Namespace != "ns-00001" || idx.Omitted != 0 {
		t.Errorf("read back: %+v; want ns-00001 then ns-00002, none omitted", idx)
	}
}

func TestInjectedIndex_BeyondItsBoundObjectsAreCountedNotListed(t *testing.T) {
	var objects []InjectedObject
	for i := range 10000 {
		objects = append(objects, injectedObject(i))
	}
	data, omitted := EncodeInjectedIndex(objects)
	if len(data) > MaxInjectedIndexBytes {
		t.Fatalf("the index is %d bytes; the bound is %d", len(data), MaxInjectedIndexBytes)
	}
	idx, err := ParseInjectedIndex(data)
	if err != nil {
		t.Fatal(err)
	}
	if omitted == 0 || idx.Omitted != omitted || len(idx.Objects)+omitted != len(objects) {
		t.Errorf("%d listed, %d omitted (index says %d), of %d; want every object listed or counted", len(idx.Objects), omitted, idx.Omitted, len(objects))
	}
	if len(idx.Objects) < 3500 {
		t.Errorf("only %d objects of two anchors fit; the bound promises about 3,700", len(idx.Objects))
	}
}

func TestParseInjectedIndex_RefusesWhatIsNoIndex(t *testing.T) {
	for _, tc := range []struct{ name, data, want string }{
		{"not JSON", "{", "not an index's JSON"},
		{"an unknown field", `{"objects":[],"extra":1}`, "unknown field"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := ParseInjectedIndex(tc.data); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v; want one saying %q", err, tc.want)
			}
		})
	}
}

// One object no controller would write leaves the others read: it is left out and
// named, so that only its readers go unobserved.
func TestParseInjectedIndex_AnObjectThatDoesNotReadLeavesTheOthers(t *testing.T) {
	good := `{"kind":"ConfigMap","namespace":"a","name":"good","sources":[{"name":"corp","path":"ca.pem"}]}`
	for _, tc := range []struct{ name, bad, want string }{
		{"an object without a name", `{"kind":"ConfigMap","sources":[{"name":"corp","path":"ca.pem"}]}`, "lists an object without a kind or name"},
		{"invalid sources", `{"kind":"ConfigMap","name":"x","sources":[]}`, "the injected index's ConfigMap x"},
		{"a bad anchor", `{"kind":"ConfigMap","namespace":"a","name":"x","sources":[{"name":"corp","path":"ca.pem"}],"anchors":["nope"]}`, `ConfigMap a/x holds "nope"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			idx, err := ParseInjectedIndex(`{"objects":[` + tc.bad + `,` + good + `]}`)
			if err != nil {
				t.Fatal(err)
			}
			if len(idx.Objects) != 1 || idx.Objects[0].Name != "good" {
				t.Errorf("objects %+v; want the good one alone", idx.Objects)
			}
			if !strings.Contains(idx.Unreadable, tc.want) {
				t.Errorf("unreadable %q; want it to say %q", idx.Unreadable, tc.want)
			}
		})
	}
	idx, err := ParseInjectedIndex(`{"objects":[{"kind":"ConfigMap","name":"x","sources":[]},{"kind":"ConfigMap","name":"y","sources":[]},` + good + `]}`)
	if err != nil || len(idx.Objects) != 1 || !strings.Contains(idx.Unreadable, "and 1 more objects") {
		t.Errorf("two bad objects: %+v, %v; want the good one kept and both counted", idx, err)
	}
}

func TestParseInjectedIndexRef_IsNamespaceSlashNameOrNothing(t *testing.T) {
	for _, tc := range []struct{ in, want, err string }{
		{in: "", want: "/"},
		{in: "trustsync/trustsync-injected", want: "trustsync/trustsync-injected"},
		{in: "trustsync-injected", err: "want NAMESPACE/NAME"},
		{in: "a/b/c", err: "want NAMESPACE/NAME"},
		{in: "Bad_NS/x", err: "RFC 1123"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseInjectedIndexRef(tc.in)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Errorf("error %v; want one saying %q", err, tc.err)
				}
				return
			}
			if err != nil || got.String() != tc.want {
				t.Errorf("%v, %v; want %s", got, err, tc.want)
			}
		})
	}
}

// One tenant's annotated objects take no more than their share: with 120 large
// objects in one namespace (the attack: about twice what the index holds), every
// other namespace's object is still listed, and the caBundle objects always are.
func TestInjectedIndex_NoNamespaceCrowdsOutAnother(t *testing.T) {
	var objects []InjectedObject
	big := func(ns string, i int) InjectedObject {
		o := InjectedObject{Kind: KindConfigMap, Namespace: ns, Name: fmt.Sprintf("fill-%03d", i)}
		for j := range 8 {
			o.Sources = append(o.Sources, Source{Name: fmt.Sprintf("bundle-%02d", j), Path: fmt.Sprintf("ca-%02d.pem", j)})
		}
		for j := range 110 {
			o.Anchors = append(o.Anchors, fmt.Sprintf("%064x", i*1000+j))
		}
		return o
	}
	// "aaa-hostile" sorts before everyone: the old order let it take the index.
	for i := range 120 {
		objects = append(objects, big("aaa-hostile", i))
	}
	for i := range 300 {
		objects = append(objects, injectedObject(i))
	}
	objects = append(objects, InjectedObject{Kind: "ValidatingWebhookConfiguration", Name: "zz-policy", Sources: []Source{{Name: "corp", Path: "ca.pem"}}})
	data, omitted := EncodeInjectedIndex(objects)
	if len(data) > MaxInjectedIndexBytes {
		t.Fatalf("the index is %d bytes; the bound is %d", len(data), MaxInjectedIndexBytes)
	}
	idx, err := ParseInjectedIndex(data)
	if err != nil {
		t.Fatal(err)
	}
	if idx.Unreadable != "" {
		t.Fatalf("the index does not read back: %s", idx.Unreadable)
	}
	listed := map[string]int{}
	for _, o := range idx.Objects {
		listed[o.Namespace]++
	}
	if listed[""] != 1 {
		t.Error("the caBundle object was crowded out")
	}
	for i := range 300 {
		if ns := injectedObject(i).Namespace; listed[ns] != 1 {
			t.Errorf("namespace %s's one object is not listed", ns)
		}
	}
	if omitted == 0 || listed["aaa-hostile"] == 0 || listed["aaa-hostile"]+omitted != 120 {
		t.Errorf("the hostile namespace: %d listed, %d omitted; want its objects beyond its share omitted, and only its", listed["aaa-hostile"], omitted)
	}
}
