package webhook

import (
	"context"
	"fmt"

	kwhlog "github.com/slok/kubewebhook/v2/pkg/log"
	"k8s.io/klog/v2"
)

// kwhLogger routes kubewebhook's logs into klog, as structured key/value pairs. Its
// per-request lines go to -v=4, where Kubernetes components keep theirs.
type kwhLogger struct {
	kv []any
}

var _ kwhlog.Logger = kwhLogger{}

type kwhCtxKey struct{}

func (l kwhLogger) Infof(format string, args ...any) {
	klog.V(4).InfoS(fmt.Sprintf(format, args...), l.kv...)
}

func (l kwhLogger) Warningf(format string, args ...any) {
	klog.V(1).InfoS(fmt.Sprintf(format, args...), l.kv...)
}

func (l kwhLogger) Errorf(format string, args ...any) {
	klog.ErrorS(nil, fmt.Sprintf(format, args...), l.kv...)
}

func (l kwhLogger) Debugf(format string, args ...any) {
	klog.V(5).InfoS(fmt.Sprintf(format, args...), l.kv...)
}

func (l kwhLogger) WithValues(values map[string]any) kwhlog.Logger {
	kv := append([]any{}, l.kv...)
	for k, v := range values {
		kv = append(kv, k, v)
	}
	return kwhLogger{kv: kv}
}

func (l kwhLogger) WithCtxValues(ctx context.Context) kwhlog.Logger {
	values, _ := ctx.Value(kwhCtxKey{}).(map[string]any)
	return l.WithValues(values)
}

func (l kwhLogger) SetValuesOnCtx(parent context.Context, values map[string]any) context.Context {
	merged := map[string]any{}
	if old, ok := parent.Value(kwhCtxKey{}).(map[string]any); ok {
		for k, v := range old {
			merged[k] = v
		}
	}
	for k, v := range values {
		merged[k] = v
	}
	return context.WithValue(parent, kwhCtxKey{}, merged)
}
