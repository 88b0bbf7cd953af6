package main

import (
	"cmp"
	"context"
	"fmt"
	"io"

	"github.com/nats-io/nkeys"

	"github.com/jingwei/jingwei/cmd/jingwei/internal/keyfile"
)

func init() {
	register(command{name: "keys", summary: "create a person's signing key (keys new) or show a key's public key and trust line (keys pub)", run: runKeys})
}

const keysHelp = `  jingwei keys new [--out FILE] [--name NAME] [--json]
  jingwei keys pub --key FILE [--name NAME] [--json]

keys new creates a person's signing key (a reviewer's or an approver's): an
nkey user key pair. The seed (the secret, "SU…") is written to FILE
(default reviewer.nk) with permissions 0600; an existing file is never
overwritten. The public key ("U…") is printed. With --name, the line to
add to a trust file is shown too: "<public key> <name>" — the recovery
worker's trusted reviewers (recover/serve --trust-reviewers, and the
console's), or the approvers the tool workers trust (worker
--trust-approvers, <auth dir>/approvers). The name is shown on every
verdict signed with the key.

The same key signs on the command line ('jingwei review --key FILE',
'jingwei approve --key FILE') and in the review console: import the seed
in the browser under "Your key" (the console itself holds no key).

keys pub prints the public key of an existing seed file; with --name, the
trust line "<public key> <name>" instead.

Exit status: 0 success; 2 usage (bad flag, FILE exists or cannot be written
or read, not an nkey user seed, a name with a newline or a #).`

// defaultKeyFile is where keys new writes the seed without --out.
const defaultKeyFile = "reviewer.nk"

func runKeys(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprintf(stderr, "Usage:\n%s\n", keysHelp)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	switch args[0] {
	case "new":
		return runKeysNew(ctx, args[1:], stdout, stderr)
	case "pub":
		return runKeysPub(ctx, args[1:], stdout, stderr)
	}
	return usageError(stderr, "keys", "unknown subcommand %q (want new or pub)", args[0])
}

func runKeysNew(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("keys new", "Create a reviewer key (nkey user seed, written 0600).", keysHelp, stderr)
	out := fs.String("out", defaultKeyFile, "file to write the seed to; must not exist")
	name := fs.String("name", "", "the person the key belongs to: shows the trust-file line \"<public key> <name>\"")
	asJSON := fs.Bool("json", false, "print {\"public_key\",\"seed_file\",\"trust_line\"} as JSON")
	if st, ok := parseFlags(fs, args); !ok {
		return st
	}
	if *out == "" {
		return usageError(stderr, "keys", "--out must name a file")
	}
	kp, err := nkeys.CreateUser()
	if err != nil {
		fmt.Fprintf(stderr, "jingwei keys new: %v\n", err)
		return exitFailure
	}
	pub, _ := kp.PublicKey()
	seed, _ := kp.Seed()
	line, err := keyfile.TrustLine(pub, *name)
	if err != nil {
		return usageError(stderr, "keys", "%v", err)
	}
	if err := writeSecretFile(*out, append(seed, '\n')); err != nil {
		return usageError(stderr, "keys", "%v", err)
	}
	if *asJSON {
		_ = writeJSON(stdout, keyfile.Output{PublicKey: pub, SeedFile: *out, TrustLine: line})
		return exitOK
	}
	fmt.Fprintln(stdout, pub)
	if line == "" {
		line = pub + " <your name>"
	}
	fmt.Fprintf(stderr, "seed written to %s (0600); trust the key with: echo '%s' >> trusted-reviewers (or the approvers file); import the seed in the review console's \"Your key\" to sign there\n", *out, line)
	return exitOK
}

func runKeysPub(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("keys pub", "Print the public key of a reviewer seed file.", keysHelp, stderr)
	file := fs.String("key", "", "seed file (required)")
	name := fs.String("name", "", "print the trust-file line \"<public key> <name>\" instead of the key alone")
	asJSON := fs.Bool("json", false, "print {\"public_key\",\"seed_file\",\"trust_line\"} as JSON")
	if st, ok := parseFlags(fs, args); !ok {
		return st
	}
	if *file == "" {
		return usageError(stderr, "keys", "--key is required")
	}
	kp, err := loadUserKey(*file)
	if err != nil {
		return usageError(stderr, "keys", "%v", err)
	}
	pub, _ := kp.PublicKey()
	line, err := keyfile.TrustLine(pub, *name)
	if err != nil {
		return usageError(stderr, "keys", "%v", err)
	}
	if *asJSON {
		_ = writeJSON(stdout, keyfile.Output{PublicKey: pub, SeedFile: *file, TrustLine: line})
		return exitOK
	}
	fmt.Fprintln(stdout, cmp.Or(line, pub))
	return exitOK
}

// writeSecretFile creates name 0600 and writes b; never replacing a file.
var writeSecretFile = keyfile.WriteSecret

// loadUserKey reads an nkey user seed from a file (bare or decorated).
var loadUserKey = keyfile.Load
