package storev1_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/types/descriptorpb"

	storev1 "github.com/sluicehq/sluice/api/sluice/store/v1"
)

// TestGeneratedCurrent checks that the generated code describes
// store.proto as it is: protoc compiles store.proto, and its descriptor
// must be the one compiled into store.pb.go (which the gRPC stubs follow).
// After changing store.proto, run make proto.
func TestGeneratedCurrent(t *testing.T) {
	if _, err := os.Stat("store.proto"); err != nil { // and go test's cache knows the file
		t.Fatal(err)
	}
	protoc, err := exec.LookPath("protoc")
	if err != nil {
		t.Skip("protoc is not installed")
	}
	out := filepath.Join(t.TempDir(), "store.pb")
	cmd := exec.Command(protoc, "-I", ".", "-I", "/usr/include", "--descriptor_set_out="+out, "store.proto")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("protoc: %v\n%s", err, b)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var set descriptorpb.FileDescriptorSet
	if err := proto.Unmarshal(b, &set); err != nil {
		t.Fatal(err)
	}
	if len(set.File) != 1 {
		t.Fatalf("protoc described %d files, want 1", len(set.File))
	}
	got := protodesc.ToFileDescriptorProto(storev1.File_store_proto)
	if !proto.Equal(set.File[0], got) {
		t.Errorf("store.pb.go does not describe store.proto as it is: run make proto")
	}
}
