package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/space-sandbox/space/internal/api/apiv1"
	"github.com/space-sandbox/space/internal/client"
	"github.com/space-sandbox/space/internal/strictjson"
)

// strList is a repeatable string flag.
type strList []string

func (l *strList) String() string     { return strings.Join(*l, ",") }
func (l *strList) Set(v string) error { *l = append(*l, v); return nil }
func (l *strList) Type() string       { return "string" }

// buildOpts are template build's own flags.
type buildOpts struct {
	fromOCI, image, fromRootfs, suite, script, recipe string
	packages                                          strList
	defaults                                          apiv1.TemplateDefaults
	env                                               kv
	noCache                                           bool
}

// templateBuild starts a build and follows it: the build log on stdout, a
// progress bar on stderr each time the progress changes.
func templateBuild(env *Env) *cobra.Command {
	o := &buildOpts{env: kv{}}
	d := &o.defaults
	return command(env, "template build", func(fs *pflag.FlagSet) {
		fs.StringVar(&o.fromOCI, "from-oci", "", "OCI image layout dir or docker-save/OCI tar on the server host")
		fs.StringVar(&o.image, "image", "", "registry image reference (oci)")
		fs.StringVar(&o.fromRootfs, "from-rootfs", "", "rootfs tar or directory on the server host")
		fs.StringVar(&o.suite, "debian", "", "Debian suite to build with mmdebstrap (e.g. bookworm)")
		fs.Var(&o.packages, "package", "Debian package to install (repeatable)")
		fs.StringVar(&o.script, "script", "", "file with a setup script run in the image (admin keys only)")
		fs.StringVar(&o.recipe, "recipe", "", "JSON recipe file (the POST /v1/templates body, e.g. templates/python.json)")
		fs.IntVar(&d.VCPUs, "vcpus", 0, "default vCPUs")
		fs.IntVar(&d.MemoryMiB, "memory-mib", 0, "default memory in MiB")
		fs.IntVar(&d.DiskMiB, "disk-mib", 0, "default root disk in MiB")
		fs.StringVar(&d.Workdir, "workdir", "", "default working directory of commands")
		fs.StringVar(&d.User, "user", "", "default user of commands")
		fs.Var(o.env, "env", "default environment (repeatable)")
		fs.BoolVar(&o.noCache, "no-cache", false, "rebuild even when the inputs are unchanged")
	}, func(ctx context.Context, cl *call) error { return build(ctx, env, cl, o) })
}

func build(ctx context.Context, env *Env, cl *call, o *buildOpts) error {
	d := o.defaults
	if len(cl.pos) > 1 || (len(cl.pos) == 0 && o.recipe == "") {
		return usagef("want template build NAME (--from-oci PATH | --image REF | --from-rootfs PATH | --debian SUITE | --recipe FILE)")
	}
	var req apiv1.CreateTemplateRequest
	sources := 0
	for _, set := range []bool{o.fromOCI != "", o.image != "", o.fromRootfs != "", o.suite != "", o.recipe != ""} {
		if set {
			sources++
		}
	}
	if sources != 1 {
		return usagef("give exactly one of --from-oci, --image, --from-rootfs, --debian and --recipe")
	}
	abs := func(p string) (string, error) { return filepath.Abs(p) }
	switch {
	case o.recipe != "":
		r, err := loadRecipe(o.recipe)
		if err != nil {
			return err
		}
		req = r
	case o.fromOCI != "":
		p, err := abs(o.fromOCI)
		if err != nil {
			return err
		}
		req.Source = apiv1.TemplateSource{Type: apiv1.SourceOCI, Path: p}
	case o.image != "":
		req.Source = apiv1.TemplateSource{Type: apiv1.SourceOCI, Image: o.image}
	case o.fromRootfs != "":
		p, err := abs(o.fromRootfs)
		if err != nil {
			return err
		}
		req.Source = apiv1.TemplateSource{Type: apiv1.SourceRootfs, Path: p}
	case o.suite != "":
		req.Source = apiv1.TemplateSource{Type: apiv1.SourceDebian, Suite: o.suite, Packages: o.packages}
	}
	if o.script != "" {
		if req.Source.Type != apiv1.SourceDebian {
			return usagef("--script goes with --debian or a debian recipe")
		}
		b, err := os.ReadFile(o.script)
		if err != nil {
			return err
		}
		req.Source.Script = string(b)
	}
	if len(cl.pos) == 1 {
		req.Name = cl.pos[0]
	}
	if len(o.env) > 0 {
		d.Env = o.env
	}
	if d.VCPUs != 0 || d.MemoryMiB != 0 || d.DiskMiB != 0 || d.Workdir != "" || d.User != "" || d.Env != nil {
		if req.Defaults == nil {
			req.Defaults = &apiv1.TemplateDefaults{}
		}
		mergeDefaults(req.Defaults, d)
	}
	req.NoCache = o.noCache
	c, err := env.client()
	if err != nil {
		return err
	}
	res, err := c.BuildTemplate(ctx, req)
	if err != nil {
		return err
	}
	if cl.noWait {
		if cl.json {
			return printJSON(env.Stdout, res)
		}
		fmt.Fprintf(env.Stdout, "building %s (%s), operation %s\n", req.Name, res.Template.ID, res.Operation.ID)
		return nil
	}
	logOut := env.Stdout
	if cl.json {
		logOut = env.Stderr
	}
	op, err := followBuild(ctx, c, req.Name, res.Operation.ID, logOut, env.Stderr)
	if err != nil {
		return err
	}
	if op.State != apiv1.OpSucceeded {
		msg := string(op.State)
		if op.Error != nil {
			msg += ": " + op.Error.Code + ": " + op.Error.Message
		}
		return fmt.Errorf("build of %s %s", req.Name, msg)
	}
	t, err := c.GetTemplate(ctx, req.Name)
	if err != nil {
		return err
	}
	if cl.json {
		return printJSON(env.Stdout, t)
	}
	fmt.Fprintf(env.Stdout, "built %s@%s (%s)\n", t.Name, t.Digest, mib(t.SizeBytes))
	return nil
}

// loadRecipe reads a JSON recipe file: the body of POST /v1/templates
// (e.g. templates/python.json). Unknown fields are refused here, so a typo
// is reported before anything is sent; the server validates the rest.
func loadRecipe(path string) (apiv1.CreateTemplateRequest, error) {
	var req apiv1.CreateTemplateRequest
	b, err := os.ReadFile(path)
	if err != nil {
		return req, usagef("template recipe: %v", err)
	}
	// strictjson: the message names the recipe's field, not a Go type.
	if err := strictjson.Decode(b, &req); err != nil {
		return req, usagef("template recipe %s: %v", path, err)
	}
	if req.Name == "" {
		return req, usagef("template recipe %s: no name", path)
	}
	return req, nil
}

// mergeDefaults sets in dst what the flags in src say.
func mergeDefaults(dst *apiv1.TemplateDefaults, src apiv1.TemplateDefaults) {
	if src.VCPUs != 0 {
		dst.VCPUs = src.VCPUs
	}
	if src.MemoryMiB != 0 {
		dst.MemoryMiB = src.MemoryMiB
	}
	if src.DiskMiB != 0 {
		dst.DiskMiB = src.DiskMiB
	}
	if src.Workdir != "" {
		dst.Workdir = src.Workdir
	}
	if src.User != "" {
		dst.User = src.User
	}
	for k, v := range src.Env {
		if dst.Env == nil {
			dst.Env = map[string]string{}
		}
		dst.Env[k] = v
	}
}

// followBuild prints a build's log until its end and a progress bar on
// each change of the operation's progress; it returns the finished
// operation. A dropped log stream is reattached where it broke.
func followBuild(ctx context.Context, c *client.Client, name, opID string, logOut, barOut io.Writer) (*apiv1.Operation, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	progress := make(chan apiv1.Operation, 1)
	go func() {
		defer close(progress)
		var last apiv1.Progress
		for ctx.Err() == nil {
			op, err := c.GetOperation(ctx, opID, 0)
			if err == nil && op.Progress != nil && *op.Progress != last {
				last = *op.Progress
				select {
				case progress <- *op:
				case <-ctx.Done():
					return
				}
			}
			if err == nil && op.Done() {
				return
			}
			select {
			case <-ctx.Done():
			case <-time.After(500 * time.Millisecond): // progress has no push channel: poll
			}
		}
	}()
	lines := make(chan error, 1)
	go func() {
		var after uint64
		for attempt := 0; ; attempt++ {
			st, err := c.BuildLog(ctx, name, opID, after)
			if err != nil {
				lines <- err
				return
			}
			for {
				ev, err := st.Next()
				after = st.Last
				if err == nil && ev.Type == apiv1.BuildLogEnd {
					st.Close()
					lines <- nil
					return
				}
				if err != nil {
					st.Close()
					if attempt >= 5 || ctx.Err() != nil {
						lines <- err
						return
					}
					break
				}
				if ev.Data != nil {
					io.WriteString(logOut, *ev.Data)
				} else {
					logOut.Write(ev.DataB64)
				}
			}
		}
	}()
	var logErr error
	logDone := false
	for !logDone {
		select {
		case op, ok := <-progress:
			if !ok {
				progress = nil
				continue
			}
			fmt.Fprintln(barOut, bar(op.Progress.Percent, op.Progress.Step))
		case logErr = <-lines:
			logDone = true
		}
	}
	op, err := c.WaitOperation(ctx, opID)
	if err != nil {
		return nil, errors.Join(err, logErr)
	}
	if op.State == apiv1.OpSucceeded {
		fmt.Fprintln(barOut, bar(100, "done"))
	}
	return op, nil
}

// bar renders a progress bar: [##########----------]  50% step
func bar(percent int, step string) string {
	const width = 30
	n := min(max(percent, 0), 100) * width / 100
	return fmt.Sprintf("[%s%s] %3d%% %s", strings.Repeat("#", n), strings.Repeat("-", width-n), percent, step)
}

func mib(b int64) string { return fmt.Sprintf("%d MiB", b>>20) }

func templateList(env *Env) *cobra.Command {
	return command(env, "template list", nil, func(ctx context.Context, cl *call) error { return listTemplates(ctx, env, cl) })
}

func listTemplates(ctx context.Context, env *Env, cl *call) error {
	c, err := env.client()
	if err != nil {
		return err
	}
	list, err := c.Templates(ctx)
	if err != nil {
		return err
	}
	if cl.json {
		return printJSON(env.Stdout, list)
	}
	tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tDIGEST\tSTATE\tSIZE\tSCOPE\tCREATED")
	for _, t := range list.Templates {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", t.Name, shortDigest(t.Digest), t.State, mib(t.SizeBytes),
			t.Scope, t.CreatedAt.Format(time.RFC3339))
	}
	return tw.Flush()
}

func shortDigest(d string) string {
	if len(d) > len("sha256:")+12 {
		return d[:len("sha256:")+12]
	}
	if d == "" {
		return "-"
	}
	return d
}

func templateGet(env *Env) *cobra.Command {
	return command(env, "template get", nil, func(ctx context.Context, cl *call) error {
		c, err := env.client()
		if err != nil {
			return err
		}
		t, err := c.GetTemplate(ctx, cl.pos[0])
		if err != nil {
			return err
		}
		return printJSON(env.Stdout, t)
	})
}

func templateDelete(env *Env) *cobra.Command {
	var force bool
	return command(env, "template delete", func(fs *pflag.FlagSet) {
		fs.BoolVar(&force, "force", false, "delete even while sandboxes or checkpoints use it")
	}, func(ctx context.Context, cl *call) error {
		c, err := env.client()
		if err != nil {
			return err
		}
		return c.DeleteTemplate(ctx, cl.pos[0], force)
	})
}
