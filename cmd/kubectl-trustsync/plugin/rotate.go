package plugin

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/trustsync/trustsync/bundle"
)

// rotatePollInterval is how often rotate --wait reads the signer's live bundle.
var rotatePollInterval = 2 * time.Second

func (o *options) rotateCommand() *cobra.Command {
	var wait time.Duration
	cmd := &cobra.Command{
		Use:   "rotate SIGNER [--wait DURATION]",
		Short: "Ask trustsync's signer for a new CA now (as the CA Secret's trustsync.io/rotate-requested-at does); with --wait, until the new CA signs",
		Example: `  # Rotate the workload signer's CA; the signer publishes the new CA and waits for the pods
  kubectl trustsync rotate trustsync.io/workload
  # ... and wait, up to an hour, until the new CA signs (exit 3 if it does not by then)
  kubectl trustsync rotate trustsync.io/workload --wait 1h`,
		Args:              cobra.MatchAll(cobra.ExactArgs(1), func(_ *cobra.Command, args []string) error { return checkSignerArg(args[0]) }),
		ValidArgsFunction: o.complete(rotatingSigners, false, true),
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.output != "" {
				return fmt.Errorf("rotate prints its progress, not an object: leave out -o (kubectl trustsync rotation %s -o json prints the rotation)", args[0])
			}
			return o.rotate(cmd.Context(), args[0], wait)
		},
	}
	cmd.Flags().DurationVar(&wait, "wait", 0, "Wait until the new CA signs, at most this long (e.g. 30m); 0: return once the rotation is asked for.")
	return cmd
}

// rotate asks signer's CA manager for a rotation by annotating its CA Secret, which
// its live bundle names, unless one is under way already; with wait, it follows the
// live bundle until the new CA signs.
func (o *options) rotate(ctx context.Context, signer string, wait time.Duration) error {
	c, err := o.clients()
	if err != nil {
		return err
	}
	status, err := liveRotation(ctx, c, signer)
	if err != nil {
		return err
	}
	// What the rotation ends with: the CA that signs once it is done differs from the
	// one signing when it was asked for.
	from := status.CurrentCA
	if status.Phase != bundle.RotationStable {
		fmt.Fprintf(o.stdout, "A rotation of %s is under way already (phase %s, new CA %s): not asking for another.\n", safe(signer), safe(status.Phase), safe(status.NewCA))
	} else {
		ns, name, ok := strings.Cut(status.CASecret, "/")
		if !ok {
			return fmt.Errorf("the live bundle of %s does not name its CA Secret (a signer older than this plugin): annotate the Secret yourself, kubectl -n NAMESPACE annotate secret trustsync-ca-%s %s=$(date -u +%%FT%%TZ)",
				signer, strings.ReplaceAll(signer, "/", "-"), bundle.RotateRequestedAnnotation)
		}
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{bundle.RotateRequestedAnnotation: time.Now().UTC().Format(time.RFC3339)}}})
		if _, err := c.core.CoreV1().Secrets(ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "kubectl-trustsync"}); err != nil {
			if apierrors.IsForbidden(err) {
				return fmt.Errorf("%w\nrotate annotates the signer's CA Secret %s: it needs patch on that Secret (secrets, resourceNames %s, in namespace %s), which the chart gives no one: an administrator's right", err, status.CASecret, name, ns)
			}
			return fmt.Errorf("ask %s for a rotation on its CA Secret %s: %w", signer, status.CASecret, err)
		}
		fmt.Fprintf(o.stdout, "Asked %s for a new CA (annotated Secret %s); the current CA is %s.\n", safe(signer), safe(status.CASecret), safe(from))
	}
	if wait <= 0 {
		return nil
	}
	deadline := time.Now().Add(wait)
	last := ""
	for {
		status, err = liveRotation(ctx, c, signer)
		if err != nil {
			return err
		}
		if status.Phase == bundle.RotationStable && status.CurrentCA != from {
			fmt.Fprintf(o.stdout, "The new CA %s signs now.\n", safe(status.CurrentCA))
			return nil
		}
		if line := safe(rotationLine(status)); line != last {
			fmt.Fprintln(o.stdout, line)
			last = line
		}
		if time.Now().After(deadline) {
			fmt.Fprintf(o.stdout, "Still %s after %s: kubectl trustsync rotation %s shows who it waits for.\n", safe(status.Phase), wait, safe(signer))
			o.code = ExitNotAll
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(rotatePollInterval):
		}
	}
}

// rotationLine is a progress line of a rotation under way.
func rotationLine(s bundle.RotationStatus) string {
	line := fmt.Sprintf("Phase %s", s.Phase)
	if s.NewCA != "" {
		line += ", new CA " + s.NewCA
	}
	if s.SignsBy != nil {
		line += ", signs by " + s.SignsBy.Format(time.RFC3339) + " at the latest"
	}
	return line
}

// liveRotation is the rotation status of signer's live bundle.
func liveRotation(ctx context.Context, c clients, signer string) (bundle.RotationStatus, error) {
	list, err := bundles(ctx, c)
	if err != nil {
		return bundle.RotationStatus{}, err
	}
	for _, b := range list {
		raw, ok := b.Annotations[bundle.RotationAnnotation]
		if !ok || b.Spec.SignerName != signer {
			continue
		}
		var s bundle.RotationStatus
		if err := json.Unmarshal([]byte(raw), &s); err != nil {
			return s, fmt.Errorf("bundle %s: annotation %s is not a rotation status: %w", b.Name, bundle.RotationAnnotation, err)
		}
		return s, nil
	}
	return bundle.RotationStatus{}, fmt.Errorf("no live bundle of trustsync's signer %s (with annotation %s): is it a signer of this trustsync's policy?", signer, bundle.RotationAnnotation)
}
