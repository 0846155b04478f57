package query

import (
	"slices"
	"strings"
)

// Unseen is what an answer could not see: running pods with trust files on one node
// that are in no readable report.
type Unseen struct {
	Node string `json:"node"`
	// Pods are namespace/name.
	Pods   []string `json:"pods"`
	Reason string   `json:"reason"`
}

// Unseen lists, by node, the running pods with trust files (in namespace, "" for
// every one) that no readable report covers: "nobody holds it" is an answer only
// where this is empty.
func (c Cluster) Unseen(namespace string) []Unseen {
	reports := c.byNode()
	byNode := map[string]*Unseen{}
	for _, pod := range c.Pods {
		if (namespace != "" && pod.Namespace != namespace) || !running(pod) || len(c.files(pod)) == 0 {
			continue
		}
		node := pod.Spec.NodeName
		r := reports[node]
		if _, ok := podIn(r, pod); ok {
			continue
		}
		u, ok := byNode[node]
		if !ok {
			u = &Unseen{Node: node, Reason: "not in node " + node + "'s report yet"}
			if r == nil {
				u.Reason = c.noReport(node)
			}
			byNode[node] = u
		}
		u.Pods = append(u.Pods, pod.Namespace+"/"+pod.Name)
	}
	out := make([]Unseen, 0, len(byNode))
	for _, u := range byNode {
		slices.Sort(u.Pods)
		out = append(out, *u)
	}
	slices.SortFunc(out, func(a, b Unseen) int { return strings.Compare(a.Node, b.Node) })
	return out
}
