package test

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The README's walkthrough is executable: its command blocks are fenced
// "```sh readme-test" (the words after "sh" do not show on GitHub) and the
// block right after each, if it is a plain fenced block, is the output the
// README shows. TestREADME runs them in order in one shell against a fresh
// `jingwei serve` and compares the shape of what each prints with the
// README's: the same lines, once ids, keys, numbers, times and paths are
// set aside. An id the README shows (c-…, p-…, op-…) stands for the one
// the run printed at the same place, and a later command that names it
// runs with the real one: so the README's ids must also agree with each
// other.
//
// Tags after "readme-test":
//
//	serve        the block starts the server: the test runs it itself, on a
//	             random port, and the other commands find it via NATS_URL
//	until-match  the output may take a while to settle (a lease to expire,
//	             a plan to run): the block is re-run until it matches, 30 s
//	nocompare    run it, do not compare its output (the README shows an
//	             excerpt)
const readmeTag = "readme-test"

// readmeBlock is one command block and the output the README shows for it.
type readmeBlock struct {
	line     int // the block's first line in README.md
	commands []string
	tags     map[string]bool
	want     []string // nil: the README shows no output
}

// readmeBlocks parses README.md's marked blocks.
func readmeBlocks(t *testing.T, path string) []readmeBlock {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	var blocks []readmeBlock
	for i := 0; i < len(lines); i++ {
		info, ok := strings.CutPrefix(lines[i], "```")
		if !ok {
			continue
		}
		start := i
		var body []string
		for i++; i < len(lines) && !strings.HasPrefix(lines[i], "```"); i++ {
			body = append(body, lines[i])
		}
		fields := strings.Fields(info)
		if len(fields) < 2 || fields[0] != "sh" || fields[1] != readmeTag {
			continue
		}
		b := readmeBlock{line: start + 1, tags: map[string]bool{}}
		for _, f := range fields[2:] {
			b.tags[f] = true
		}
		for _, c := range body {
			if c = strings.TrimSpace(c); c != "" && !strings.HasPrefix(c, "#") {
				b.commands = append(b.commands, c)
			}
		}
		// The output block follows, with at most blank lines between.
		j := i + 1
		for j < len(lines) && strings.TrimSpace(lines[j]) == "" {
			j++
		}
		if j < len(lines) && (lines[j] == "```" || lines[j] == "```text") {
			b.want = []string{}
			for j++; j < len(lines) && !strings.HasPrefix(lines[j], "```"); j++ {
				b.want = append(b.want, lines[j])
			}
			i = j
		}
		blocks = append(blocks, b)
	}
	return blocks
}

// volatile are the parts of an output that differ from run to run, each
// with the placeholder that stands for it in the comparison. Ids come first:
// they are also remembered (idPattern).
var volatile = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`\b(c|p|op|ord)-[0-9a-f]{24,32}\b`), "<id>"},
	{regexp.MustCompile(`\bS?U[A-Z2-7]{55}\b`), "<key>"},
	{regexp.MustCompile(`\bU[A-Z2-7]{11}\.\.\.`), "<key>..."},
	{regexp.MustCompile(`\b\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)`), "<time>"},
	{regexp.MustCompile(`\b\d\d:\d\d:\d\d\b`), "<time>"},
	{regexp.MustCompile(`(/[\w.+-]+)+/?`), "<path>"},
	{regexp.MustCompile(`[A-Za-z_-]*\d+(\.\d+)?(ms|s|µs)?\b`), "N"},
}

// jobNotice is bash's note that a background job was killed (the
// walkthrough's kill -9), which an interactive shell shows as "[1]+ Killed".
var jobNotice = regexp.MustCompile(`^bash: line \d+: +\d+ Killed `)

// idPattern matches the ids a later command may name.
var idPattern = regexp.MustCompile(`\b(c|p|op)-[0-9a-f]{32}\b`)

// shape is line with its volatile parts replaced and its runs of spaces
// made one (table columns are as wide as their values).
func shape(line string) string {
	for _, v := range volatile {
		line = v.re.ReplaceAllString(line, v.with)
	}
	return strings.Join(strings.Fields(line), " ")
}

// readmeRun is the walkthrough's shell and what it has learned.
type readmeRun struct {
	t     *testing.T
	dir   string
	bin   string
	env   []string
	ids   map[string]string // README id -> the run's
	serve *exec.Cmd
}

// TestREADME runs the README's walkthrough (see readmeTag).
func TestREADME(t *testing.T) {
	bin := jingweiBinary(t)
	blocks := readmeBlocks(t, filepath.Join("..", "README.md"))
	if len(blocks) < 8 {
		t.Fatalf("README.md has %d blocks marked %q; the walkthrough lost its marks", len(blocks), readmeTag)
	}
	dir := t.TempDir()
	r := &readmeRun{t: t, dir: dir, bin: bin, ids: map[string]string{},
		env: append(os.Environ(), "PATH="+filepath.Dir(bin)+":"+os.Getenv("PATH"), "JINGWEI_LOG_LEVEL=warn", "NATS_URL=", "JINGWEI_AUTH=", "NATS_NKEY=", "NATS_CREDS=")}
	sh := r.shell()
	// JINGWEI_README_DUMP=FILE writes what each block printed to FILE, to
	// bring the README's outputs up to date from one run.
	dump := os.Getenv("JINGWEI_README_DUMP")
	defer func() {
		if dump != "" {
			var ids []string
			for k, v := range r.ids {
				ids = append(ids, k+" "+v)
			}
			appendFile(t, dump, "== ids\n"+strings.Join(ids, "\n")+"\n")
		}
	}()
	for _, b := range blocks {
		if b.tags["serve"] {
			r.startServe(b)
			sh = r.shell() // the shell must see NATS_URL
			continue
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			got := r.runBlock(sh, b)
			diff := r.compare(b, got)
			last := diff == "" || !b.tags["until-match"] || time.Now().After(deadline)
			if dump != "" && last {
				if diff != "" {
					r.learnAnyway(b, got)
				}
				appendFile(t, dump, fmt.Sprintf("== %d\n%s\n", b.line, strings.Join(got, "\n")))
			}
			if diff == "" {
				break
			}
			if last {
				t.Errorf("README.md:%d %q: the output does not have the README's shape:\n%s\n--- got:\n%s", b.line, b.commands, diff, strings.Join(got, "\n"))
				break
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
}

// substitute replaces the README's ids in command with the run's.
func (r *readmeRun) substitute(command string) string {
	return idPattern.ReplaceAllStringFunc(command, func(id string) string {
		if real, ok := r.ids[id]; ok {
			return real
		}
		return id
	})
}

// compare returns "" when got has the shape of the README's output for b
// (and learns the ids it shows), or what differs.
func (r *readmeRun) compare(b readmeBlock, got []string) string {
	if b.want == nil || b.tags["nocompare"] {
		return ""
	}
	want := trimBlank(b.want)
	got = trimBlank(got)
	var diff []string
	learned := map[string]string{}
	for i := 0; i < max(len(want), len(got)); i++ {
		var w, g string
		if i < len(want) {
			w = want[i]
		}
		if i < len(got) {
			g = got[i]
		}
		if shape(w) != shape(g) {
			diff = append(diff, fmt.Sprintf("line %d\n  README: %s\n  got:    %s", i+1, w, g))
			continue
		}
		wi, gi := idPattern.FindAllString(w, -1), idPattern.FindAllString(g, -1)
		for k := range min(len(wi), len(gi)) {
			if prev, ok := learned[wi[k]]; ok && prev != gi[k] {
				diff = append(diff, fmt.Sprintf("line %d: the README's %s stands for both %s and %s", i+1, wi[k], prev, gi[k]))
			}
			if prev, ok := r.ids[wi[k]]; ok && prev != gi[k] {
				diff = append(diff, fmt.Sprintf("line %d: the README's %s was %s before, here %s: the README's ids disagree", i+1, wi[k], prev, gi[k]))
			}
			learned[wi[k]] = gi[k]
		}
	}
	if len(diff) > 0 {
		return strings.Join(diff, "\n")
	}
	for k, v := range learned {
		r.ids[k] = v
	}
	return ""
}

// learnAnyway pairs the ids of a block that did not match, in the order
// they first appear, so that a dump run (JINGWEI_README_DUMP) goes on
// with the run's ids.
func (r *readmeRun) learnAnyway(b readmeBlock, got []string) {
	firsts := func(lines []string) []string {
		seen := map[string]bool{}
		var out []string
		for _, id := range idPattern.FindAllString(strings.Join(lines, "\n"), -1) {
			if !seen[id] {
				seen[id] = true
				out = append(out, id)
			}
		}
		return out
	}
	w, g := firsts(b.want), firsts(got)
	for k := range min(len(w), len(g)) {
		if _, ok := r.ids[w[k]]; !ok {
			r.ids[w[k]] = g[k]
		}
	}
}

func trimBlank(lines []string) []string {
	for len(lines) > 0 && strings.TrimSpace(lines[0]) == "" {
		lines = lines[1:]
	}
	for len(lines) > 0 && strings.TrimSpace(lines[len(lines)-1]) == "" {
		lines = lines[:len(lines)-1]
	}
	return lines
}

// shell is a bash that runs the walkthrough's commands one by one in the
// walkthrough's directory, stderr into stdout as a terminal shows them.
type shell struct {
	in  io.WriteCloser
	out *bufio.Reader
	n   int
}

func (r *readmeRun) shell() *shell {
	r.t.Helper()
	cmd := exec.Command("bash", "--noprofile", "--norc")
	cmd.Dir, cmd.Env = r.dir, r.env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	in, err := cmd.StdinPipe()
	if err != nil {
		r.t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		r.t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() {
		_ = in.Close()
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) // the background workers too
		_ = cmd.Wait()
	})
	s := &shell{in: in, out: bufio.NewReader(out)}
	fmt.Fprintln(in, "exec 2>&1")
	return s
}

// runBlock runs b's commands and returns what they printed.
func (r *readmeRun) runBlock(s *shell, b readmeBlock) []string {
	r.t.Helper()
	var got []string
	for _, c := range b.commands {
		c = strings.ReplaceAll(r.substitute(c), "go run ./cmd/jingwei", "jingwei")
		s.n++
		marker := fmt.Sprintf("__readme_done_%d__", s.n)
		fmt.Fprintf(s.in, "%s\nprintf '\\n%s\\n'\n", c, marker)
		done := make(chan error, 1)
		var lines []string
		go func() {
			for {
				l, err := s.out.ReadString('\n')
				if err != nil {
					done <- err
					return
				}
				l = strings.TrimSuffix(l, "\n")
				if l == marker {
					done <- nil
					return
				}
				if !jobNotice.MatchString(l) {
					lines = append(lines, l)
				}
			}
		}()
		select {
		case err := <-done:
			if err != nil {
				r.t.Fatalf("README.md:%d %q: the shell ended: %v\n%s", b.line, c, err, strings.Join(lines, "\n"))
			}
		case <-time.After(90 * time.Second):
			r.t.Fatalf("README.md:%d %q: no end within 90s", b.line, c)
		}
		if n := len(lines); n > 0 && lines[n-1] == "" { // the marker's own newline
			lines = lines[:n-1]
		}
		got = append(got, lines...)
	}
	return got
}

// startServe runs the README's serve command on a random port in the
// walkthrough's directory and compares what it prints with the README.
func (r *readmeRun) startServe(b readmeBlock) {
	r.t.Helper()
	if len(b.commands) != 1 || !strings.HasPrefix(b.commands[0], "jingwei serve") {
		r.t.Fatalf("README.md:%d: a serve block holds one `jingwei serve` command: %q", b.line, b.commands)
	}
	args := append(strings.Fields(b.commands[0])[1:], "--listen", "127.0.0.1:-1")
	cmd := exec.Command(r.bin, args...)
	cmd.Dir, cmd.Env = r.dir, r.env
	out, err := cmd.StdoutPipe()
	if err != nil {
		r.t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout // its key lines go to stderr, as a terminal shows them
	if err := cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	r.serve = cmd
	r.t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	})
	want := trimBlank(b.want)
	got := make([]string, 0, len(want))
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	timeout := time.After(30 * time.Second)
	for len(got) < len(want) {
		select {
		case l, ok := <-lines:
			if !ok {
				r.t.Fatalf("README.md:%d: jingwei serve exited:\n%s", b.line, strings.Join(got, "\n"))
			}
			got = append(got, l)
		case <-timeout:
			r.t.Fatalf("README.md:%d: jingwei serve printed %d of the README's %d lines in 30s:\n%s", b.line, len(got), len(want), strings.Join(got, "\n"))
		}
	}
	go func() { // keep its stdout drained
		for range lines {
		}
	}()
	if diff := r.compare(b, got); diff != "" {
		r.t.Fatalf("README.md:%d jingwei serve: the output does not have the README's shape:\n%s", b.line, diff)
	}
	m := regexp.MustCompile(`listening on (nats://\S+)`).FindStringSubmatch(strings.Join(got, "\n"))
	if m == nil {
		r.t.Fatalf("README.md:%d: no URL in %q", b.line, got)
	}
	r.env = append(r.env, "NATS_URL="+m[1])
}

func appendFile(t *testing.T, path, text string) {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(text); err != nil {
		t.Fatal(err)
	}
}
