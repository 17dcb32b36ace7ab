package convention

import (
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/space-sandbox/space/internal/testenv"
)

var (
	// inlineLink is [text](target) or [text](target "title"); the text may
	// hold an image or code. ![alt](src) matches too.
	inlineLink = regexp.MustCompile(`\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
	// refLink is a reference definition: [name]: target
	refLink = regexp.MustCompile(`^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)`)
	// codeSpan is inline code, whose brackets are not links.
	codeSpan = regexp.MustCompile("`[^`]*`")
	// docName is a code span that names a Markdown document (`docs/api.md`):
	// a reader takes it for a file of the repository, so it must be one.
	docName = regexp.MustCompile("`([A-Za-z0-9_][A-Za-z0-9_./-]*\\.md)(#[^`]*)?`")
)

// TestNoDeadRelativeLinks: every relative link of the top-level Markdown
// files (README.md, SECURITY.md, …) and of docs/ names a file or directory
// of the repository, as a clean checkout has it: a link to a file that was
// never committed, or that moved, fails here instead of in a reader's
// browser. A document named in code (`docs/security.md`) counts as a
// link, resolved from the document's directory or the repository's root.
func TestNoDeadRelativeLinks(t *testing.T) {
	root := testenv.ModuleRoot(t)
	exists := repoPaths(t, root)
	docs, _ := filepath.Glob(filepath.Join(root, "*.md"))
	more, _ := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	docs = append(docs, more...)
	if len(docs) < 2 {
		t.Fatalf("found only %v: the test looks in the wrong place", docs)
	}
	checked := 0
	for _, doc := range docs {
		relDoc, _ := filepath.Rel(root, doc)
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, target := range relativeLinks(string(b)) {
			checked++
			p := path.Clean(path.Join(path.Dir(filepath.ToSlash(relDoc)), target.path))
			if strings.HasPrefix(p, "../") || p == ".." {
				t.Errorf("%s:%d: link %q leaves the repository", relDoc, target.line, target.raw)
				continue
			}
			if target.named && !exists(p) {
				p = path.Clean(target.path) // named from the root
			}
			if !exists(p) {
				t.Errorf("%s:%d: link %q names %s, which the repository does not have", relDoc, target.line, target.raw, p)
			}
		}
	}
	if checked == 0 {
		t.Error("no relative link found in any document: the link pattern is broken")
	}
}

type link struct {
	raw, path string
	line      int
	// named: a document named in code rather than a Markdown link.
	named bool
}

// relativeLinks are the links of a Markdown text that name a path in the
// repository: not URLs with a scheme, not bare #anchors, not inside code.
func relativeLinks(md string) []link {
	var out []link
	fenced := false
	for n, line := range strings.Split(md, "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			fenced = !fenced
			continue
		}
		if fenced || strings.HasPrefix(line, "    ") && trimmed != "" && !strings.HasPrefix(trimmed, "-") && !strings.HasPrefix(trimmed, "|") {
			continue // code (an indented line that is not a nested list item or table row)
		}
		for _, m := range docName.FindAllStringSubmatch(line, -1) {
			out = append(out, link{raw: m[0], path: m[1], line: n + 1, named: true})
		}
		line = codeSpan.ReplaceAllString(line, "``")
		var targets []string
		for _, m := range inlineLink.FindAllStringSubmatch(line, -1) {
			targets = append(targets, m[1])
		}
		if m := refLink.FindStringSubmatch(line); m != nil {
			targets = append(targets, m[1])
		}
		for _, raw := range targets {
			if u, err := url.Parse(raw); err != nil || u.Scheme != "" || strings.HasPrefix(raw, "//") {
				continue
			}
			p, _, _ := strings.Cut(raw, "#")
			p, _, _ = strings.Cut(p, "?")
			if p == "" {
				continue // an anchor in the same document
			}
			if dec, err := url.PathUnescape(p); err == nil {
				p = dec
			}
			out = append(out, link{raw: raw, path: p, line: n + 1})
		}
	}
	return out
}

// repoPaths reports whether a slash-separated path is a file or directory
// of the repository: tracked, or new and not ignored (a clean checkout
// after the commit has it). Outside git, the work tree decides.
func repoPaths(t *testing.T, root string) func(string) bool {
	out, err := exec.Command("git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard").Output()
	if err != nil {
		return func(p string) bool { _, err := os.Stat(filepath.Join(root, p)); return err == nil }
	}
	paths := map[string]bool{".": true}
	for _, name := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		if name == "" {
			continue
		}
		if _, err := os.Lstat(filepath.Join(root, name)); err != nil {
			continue // deleted in the work tree
		}
		for p := name; p != "." && p != "/"; p = path.Dir(p) {
			paths[p] = true
		}
	}
	return func(p string) bool { return paths[strings.TrimSuffix(p, "/")] }
}

func TestRelativeLinks(t *testing.T) {
	md := "See [the docs](docs/a.md#part), [site](https://x.example/y), [top](#top), ![img](img/p.png \"t\").\n" +
		"```\n[not](a-link.md)\n```\n" +
		"Code `[no](no.md)` and [ref]: no.md, `go test`, `docs/c.md#x`\n" +
		"[ref]: ../up.md\n" +
		"[def]: <docs/b%20c.md>\n"
	var got []string
	for _, l := range relativeLinks(md) {
		got = append(got, l.path)
	}
	if strings.Join(got, ",") != "docs/a.md,img/p.png,docs/c.md,../up.md,docs/b c.md" {
		t.Errorf("relativeLinks = %q", got)
	}
}
