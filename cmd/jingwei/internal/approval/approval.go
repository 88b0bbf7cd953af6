// Package approval holds a tool worker's approval settings as the CLI
// takes them (jingwei worker, jingwei serve): which calls wait for a
// signed approval (--require-approval rules) and whose signed answers
// count (the trusted approvers' files).
package approval

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/worker"
)

// ApproversFile is the name of the trusted approvers' file in an auth
// directory, the tool workers' default trust list.
const ApproversFile = "approvers"

// ParseRules parses --require-approval specs (TOOL, or TOOL:FIELD>N for
// calls whose numeric argument FIELD is above N) into rules by tool name,
// each waiting at most timeout, which must be positive.
func ParseRules(specs []string, timeout time.Duration) (map[string]*worker.ApprovalRule, error) {
	if timeout <= 0 {
		return nil, errors.New("--approval-timeout must be positive")
	}
	out := map[string]*worker.ApprovalRule{}
	for _, spec := range specs {
		tool, cond, hasCond := strings.Cut(spec, ":")
		rule := &worker.ApprovalRule{Timeout: timeout}
		if hasCond {
			field, limit, ok := strings.Cut(cond, ">")
			n, err := strconv.ParseFloat(limit, 64)
			if !ok || field == "" || err != nil {
				return nil, fmt.Errorf("--require-approval %q: want TOOL or TOOL:FIELD>NUMBER", spec)
			}
			rule.When = worker.WhenAbove(field, n) // a missing or non-numeric field asks
		}
		if tool == "" {
			return nil, fmt.Errorf("--require-approval %q: no tool", spec)
		}
		out[tool] = rule
	}
	return out, nil
}

// ApplyRules sets the rules on the tools they name; a rule for a tool that
// is not in list is an error.
func ApplyRules(list []worker.Tool, rules map[string]*worker.ApprovalRule) ([]worker.Tool, error) {
	seen := map[string]bool{}
	for i := range list {
		if r, ok := rules[list[i].Metadata.Name]; ok {
			list[i].Approval = r
			seen[list[i].Metadata.Name] = true
		}
	}
	for name := range rules {
		if !seen[name] {
			return nil, fmt.Errorf("--require-approval: no tool %q", name)
		}
	}
	return list, nil
}

// Approvers reads the trusted approver keys: file, else
// <authDir>/approvers when it exists, else none (nil, "": every waiting
// call then times out). It returns the file it read.
func Approvers(file, authDir string) (recovery.TrustedKeys, string, error) {
	if file == "" {
		if authDir == "" {
			return nil, "", nil
		}
		file = filepath.Join(authDir, ApproversFile)
		if _, err := os.Stat(file); err != nil {
			return nil, "", nil
		}
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, file, err
	}
	t, err := recovery.ParseTrustedKeys(b)
	return t, file, err
}

// ServeApproverName is the name the approvers file gives serve's own
// approver key: the deployment's operator approving from the command line.
const ServeApproverName = "serve operator (approver.nk)"

// ServeTrust returns the approvers serve's tool worker trusts: serve's own
// approver key pub and the keys of extraFile (--trust-approvers; "":
// none). It also lists pub, named ServeApproverName, in
// <authDir>/approvers (created 0600 in a 0700 directory when missing), so
// that tool workers started with --auth trust it too.
func ServeTrust(pub, extraFile, authDir string) (recovery.TrustedKeys, error) {
	trusted, err := recovery.NewTrustedKeys(pub)
	if err != nil {
		return nil, err
	}
	if extraFile != "" {
		b, err := os.ReadFile(extraFile)
		if err != nil {
			return nil, fmt.Errorf("--trust-approvers: %w", err)
		}
		more, err := recovery.ParseTrustedKeys(b)
		if err != nil {
			return nil, fmt.Errorf("--trust-approvers %s: %w", extraFile, err)
		}
		for k := range more {
			trusted[k] = struct{}{}
		}
	}
	return trusted, listApprover(authDir, pub)
}

// listApprover appends pub to <authDir>/approvers unless it is there.
func listApprover(authDir, pub string) error {
	list := filepath.Join(authDir, ApproversFile)
	if b, err := os.ReadFile(list); err == nil && strings.Contains(string(b), pub) {
		return nil
	}
	if err := os.MkdirAll(authDir, 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(list, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	// Named, as every trust line is (recovery.ParseNamedKeys): the
	// verdicts signed with serve's own key say whose they are.
	_, err = fmt.Fprintln(f, pub, ServeApproverName)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// ReadNamed reads a trusted-keys file with the names it gives the keys
// (the console shows who signed): file, else <authDir>/approvers when
// authDir is given and it exists, else none known (nil, nil).
func ReadNamed(file, authDir string) (recovery.TrustedKeys, recovery.KeyNames, error) {
	if file == "" {
		if authDir == "" {
			return nil, nil, nil
		}
		file = filepath.Join(authDir, ApproversFile)
		if _, err := os.Stat(file); err != nil {
			return nil, nil, nil
		}
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, nil, err
	}
	t, names, err := recovery.ParseNamedKeys(b)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", file, err)
	}
	return t, names, nil
}
