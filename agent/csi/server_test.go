package csi

import (
	"context"
	"strings"
	"testing"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

type recordingVolumes struct {
	published, unpublished []string
	req                    PublishRequest
}

func (r *recordingVolumes) Publish(_ context.Context, req PublishRequest) error {
	r.published = append(r.published, req.VolumeID+" "+req.TargetPath)
	r.req = req
	return nil
}

func (r *recordingVolumes) Unpublish(_ context.Context, id, target string) error {
	r.unpublished = append(r.unpublished, id+" "+target)
	return nil
}

var mountCapability = &csi.VolumeCapability{AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}}}

// Requests the agent cannot serve are refused before any volume is touched, saying why.
func TestNodePublishVolume_RefusesWhatIsNotAnInlineVolume(t *testing.T) {
	ephemeral := map[string]string{ephemeralAttribute: "true"}
	tests := []struct {
		name    string
		req     *csi.NodePublishVolumeRequest
		wantErr string
	}{
		{"no volume id", &csi.NodePublishVolumeRequest{TargetPath: "/t", VolumeCapability: mountCapability, VolumeContext: ephemeral}, "volume_id is required"},
		{"a relative target", &csi.NodePublishVolumeRequest{VolumeId: "v", TargetPath: "t", VolumeCapability: mountCapability, VolumeContext: ephemeral}, `target_path "t" must be a clean absolute path`},
		{"a target with ..", &csi.NodePublishVolumeRequest{VolumeId: "v", TargetPath: "/a/../t", VolumeCapability: mountCapability, VolumeContext: ephemeral}, "must be a clean absolute path"},
		{"a block volume", &csi.NodePublishVolumeRequest{VolumeId: "v", TargetPath: "/t", VolumeCapability: &csi.VolumeCapability{AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}}}, VolumeContext: ephemeral}, "must ask for a mounted filesystem"},
		{"a persistent volume", &csi.NodePublishVolumeRequest{VolumeId: "v", TargetPath: "/t", VolumeCapability: mountCapability}, "serves inline ephemeral volumes only"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			vols := &recordingVolumes{}
			s := &Server{Driver: "csi.trustsync.io", Volumes: vols}
			_, err := s.NodePublishVolume(context.Background(), tc.req)
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want InvalidArgument with %q", err, tc.wantErr)
			}
			if len(vols.published) > 0 {
				t.Errorf("a refused request published %v", vols.published)
			}
		})
	}
}

func TestNodePublishVolume_HandsAnInlineVolumeOver(t *testing.T) {
	vols := &recordingVolumes{}
	s := &Server{Driver: "csi.trustsync.io", Volumes: vols}
	if _, err := s.NodePublishVolume(context.Background(), &csi.NodePublishVolumeRequest{VolumeId: "v", TargetPath: "/pods/u/mount", VolumeCapability: mountCapability,
		VolumeContext: map[string]string{ephemeralAttribute: "true"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.NodeUnpublishVolume(context.Background(), &csi.NodeUnpublishVolumeRequest{VolumeId: "v", TargetPath: "/pods/u/mount"}); err != nil {
		t.Fatal(err)
	}
	if len(vols.published) != 1 || len(vols.unpublished) != 1 {
		t.Errorf("published %v, unpublished %v", vols.published, vols.unpublished)
	}
}

// The kubelet passes the pod's tokens as secrets when the CSIDriver says so, and as
// attributes before: the volume gets them either way, apart from its attributes.
func TestNodePublishVolume_TakesTheTokensFromTheSecretsOrTheAttributes(t *testing.T) {
	for name, req := range map[string]*csi.NodePublishVolumeRequest{
		"secrets":    {Secrets: map[string]string{TokensKey: "{}"}, VolumeContext: map[string]string{ephemeralAttribute: "true"}},
		"attributes": {VolumeContext: map[string]string{ephemeralAttribute: "true", TokensKey: "{}"}},
	} {
		req.VolumeId, req.TargetPath, req.VolumeCapability = "v", "/t", mountCapability
		vols := &recordingVolumes{}
		s := &Server{Driver: "csi.trustsync.io", Volumes: vols}
		if _, err := s.NodePublishVolume(context.Background(), req); err != nil {
			t.Fatal(err)
		}
		if !vols.req.HasTokens || vols.req.Tokens != "{}" {
			t.Errorf("tokens as %s: the volume got tokens %q (%v)", name, vols.req.Tokens, vols.req.HasTokens)
		}
		if _, mixed := vols.req.Attributes[TokensKey]; mixed {
			t.Errorf("tokens as %s: the tokens are among the attributes %v", name, vols.req.Attributes)
		}
	}
}

func TestSocketPath(t *testing.T) {
	for in, want := range map[string]string{"unix:///csi/csi.sock": "/csi/csi.sock", "/csi/csi.sock": "/csi/csi.sock"} {
		if got, err := SocketPath(in); err != nil || got != want {
			t.Errorf("SocketPath(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"tcp://127.0.0.1:10000", "csi.sock", "unix://csi.sock"} {
		if _, err := SocketPath(bad); err == nil {
			t.Errorf("SocketPath(%q) accepted", bad)
		}
	}
}
