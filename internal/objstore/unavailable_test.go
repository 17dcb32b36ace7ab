package objstore_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/space-sandbox/space/internal/errdefs"
	"github.com/space-sandbox/space/internal/objstore"
	"github.com/space-sandbox/space/internal/testenv/s3test"
)

// TestStoreStoppedIsUnavailable stops the object store under an open Store:
// every call fails with unavailable (not a hang, not a deadline) well
// within the test's own bound.
func TestStoreStoppedIsUnavailable(t *testing.T) {
	srv := s3test.New(t, "space-down")
	s := openStore(t, srv, objstore.Options{})
	ctx := testCtx(t)
	dir := t.TempDir()
	writeAt(t, filepath.Join(dir, "state"), mib, map[int64][]byte{0: randBytes(mib)})
	if _, err := s.PutSnapshot(ctx, "before", dir, []string{"state"}); err != nil {
		t.Fatal(err)
	}
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	calls := map[string]func(context.Context) error{
		"put": func(ctx context.Context) error {
			_, err := s.PutSnapshot(ctx, "after", dir, []string{"state"})
			return err
		},
		"get":  func(ctx context.Context) error { _, err := s.GetSnapshot(ctx, "before", t.TempDir()); return err },
		"stat": func(ctx context.Context) error { _, err := s.StatSnapshot(ctx, "before"); return err },
		"list": func(ctx context.Context) error { _, err := s.ListSnapshots(ctx, ""); return err },
		"delete": func(ctx context.Context) error {
			return s.DeleteSnapshot(ctx, "before")
		},
		"gc": func(ctx context.Context) error { _, err := s.GC(ctx, 0); return err },
		"open": func(ctx context.Context) error {
			_, err := objstore.Open(ctx, s.Location(), objstore.Credentials{AccessKey: "a", SecretKey: "b"}, objstore.Options{})
			return err
		},
	}
	for name, call := range calls {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		err := call(cctx)
		cancel()
		if !errors.Is(err, errdefs.ErrUnavailable) {
			t.Errorf("%s with the store stopped: %v, want unavailable", name, err)
		}
	}
}

func TestWrongCredentialsArePermissionDenied(t *testing.T) {
	srv := sharedServer(t)
	loc, err := objstore.ParseURL(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	_, err = objstore.Open(testCtx(t), loc, objstore.Credentials{AccessKey: srv.AccessKey, SecretKey: "wrong-secret-123"}, objstore.Options{})
	if !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Errorf("Open with a wrong secret: %v, want permission_denied", err)
	}
	if err != nil && strings.Contains(err.Error(), "wrong-secret-123") {
		t.Errorf("the error shows the secret: %v", err)
	}
	loc.Bucket = "no-such-bucket"
	if _, err := objstore.Open(testCtx(t), loc, objstore.Credentials{AccessKey: srv.AccessKey, SecretKey: srv.SecretKey}, objstore.Options{}); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("Open of a missing bucket: %v, want failed_precondition", err)
	}
}

func TestParseURL(t *testing.T) {
	for _, tc := range []struct {
		url  string
		want objstore.Location
		bad  bool
	}{
		{url: "s3://snaps?endpoint=127.0.0.1:9000&tls=false", want: objstore.Location{Endpoint: "127.0.0.1:9000", Region: "us-east-1", Bucket: "snaps"}},
		{url: "s3://snaps/space/prod?endpoint=s3.example.com:443&region=eu-west-1",
			want: objstore.Location{Endpoint: "s3.example.com:443", Secure: true, Region: "eu-west-1", Bucket: "snaps", Prefix: "space/prod"}},
		{url: "http://snaps?endpoint=h:1", bad: true},
		{url: "s3://snaps", bad: true},                           // no endpoint
		{url: "s3://snaps?endpoint=host", bad: true},             // no port
		{url: "s3://Snaps?endpoint=h:1", bad: true},              // bucket name
		{url: "s3://key:secret@snaps?endpoint=h:1", bad: true},   // credentials in the URL
		{url: "s3://snaps/a/../b?endpoint=h:1", bad: true},       // prefix
		{url: "s3://snaps?endpoint=h:1&tls=maybe", bad: true},    // tls
		{url: "s3://snaps?endpoint=h:1&secret_key=x", bad: true}, // unknown parameter
		{url: "s3://snaps/p%20q?endpoint=h:1", bad: true},        // space in prefix
	} {
		got, err := objstore.ParseURL(tc.url)
		if tc.bad {
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("ParseURL(%q) = %+v, %v; want invalid_argument", tc.url, got, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseURL(%q) = %+v, %v; want %+v", tc.url, got, err, tc.want)
			continue
		}
		if again, err := objstore.ParseURL(got.String()); err != nil || again != got {
			t.Errorf("round trip of %q through %q = %+v, %v", tc.url, got.String(), again, err)
		}
	}
}

func TestCredentialsStayHidden(t *testing.T) {
	const secret = "s3cr3t-value-xyz"
	c := objstore.Credentials{AccessKey: "AK1", SecretKey: secret}
	var logged strings.Builder
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("opened", "creds", c)
	for _, s := range []string{fmt.Sprint(c), fmt.Sprintf("%v %+v %#v %s", c, c, c, c), logged.String()} {
		if strings.Contains(s, secret) {
			t.Errorf("the secret shows in %q", s)
		}
	}

	dir := t.TempDir()
	file := filepath.Join(dir, "s3.creds")
	os.WriteFile(file, []byte("# object store\naccess_key = AK2\nsecret_key="+secret+"\n"), 0o600)
	got, err := objstore.LoadCredentials(file)
	if err != nil || got.AccessKey != "AK2" || got.SecretKey != secret {
		t.Errorf("LoadCredentials = %v, %v", got, err)
	}
	os.Chmod(file, 0o644)
	if _, err := objstore.LoadCredentials(file); !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Errorf("a world-readable credentials file: %v, want permission_denied", err)
	}
	os.WriteFile(filepath.Join(dir, "bad"), []byte(secret+"\n"), 0o600)
	if _, err := objstore.LoadCredentials(filepath.Join(dir, "bad")); !errors.Is(err, errdefs.ErrInvalidArgument) || strings.Contains(err.Error(), secret) {
		t.Errorf("a malformed file: %v; want invalid_argument without the line", err)
	}
	t.Setenv(objstore.EnvAccessKey, "AK3")
	t.Setenv(objstore.EnvSecretKey, secret)
	if got, err := objstore.LoadCredentials(""); err != nil || got.AccessKey != "AK3" || got.SecretKey != secret {
		t.Errorf("from the environment: %v, %v", got, err)
	}
	t.Setenv(objstore.EnvSecretKey, "")
	if _, err := objstore.LoadCredentials(""); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("no secret in the environment: %v", err)
	}
}
