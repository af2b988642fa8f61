// Command plots generates the pictures and tables of docs/algorithms.md from
// the engine itself: every scenario runs limit.New on a memory store with a
// fake clock, through the public Consume API, and the plots show the
// Decisions it returns.
//
//	go generate ./...          # in docs/plots: rewrite docs/algorithms/*.svg and the tables
//	go run . -png /tmp/plots   # also write PNG copies somewhere for viewing
//
// It prints the tables it writes. The output is deterministic: fixed
// instants, fixed identities. TestGeneratedFilesAreCurrent fails when the
// committed files differ from what this command would write.
package main

//go:generate go run .

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
)

func main() {
	docs := flag.String("docs", "..", "the docs directory: algorithms.md and algorithms/ are written there")
	png := flag.String("png", "", "when set, also write a PNG of every figure into this directory")
	flag.Parse()
	if err := run(*docs, *png); err != nil {
		fmt.Fprintln(os.Stderr, "plots:", err)
		os.Exit(1)
	}
}

// outputs returns every generated file, by path relative to the docs
// directory, given the current docs/algorithms.md.
func outputs(r *results, doc string) (map[string][]byte, error) {
	files := map[string][]byte{}
	figs, err := r.figures()
	if err != nil {
		return nil, err
	}
	for _, f := range figs {
		b, err := render(f, "svg")
		if err != nil {
			return nil, fmt.Errorf("%s.svg: %w", f.name, err)
		}
		files[filepath.Join("algorithms", f.name+".svg")] = b
	}
	md, err := splice(doc, r.blocks)
	if err != nil {
		return nil, err
	}
	files["algorithms.md"] = []byte(md)
	return files, nil
}

func run(docs, png string) error {
	r, err := collect()
	if err != nil {
		return err
	}
	doc, err := os.ReadFile(filepath.Join(docs, "algorithms.md"))
	if err != nil {
		return err
	}
	files, err := outputs(r, string(doc))
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(docs, "algorithms"), 0o755); err != nil {
		return err
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		if err := os.WriteFile(filepath.Join(docs, n), files[n], 0o644); err != nil {
			return err
		}
		fmt.Println("wrote", filepath.Join(docs, n))
	}
	if png != "" {
		if err := os.MkdirAll(png, 0o755); err != nil {
			return err
		}
		figs, err := r.figures()
		if err != nil {
			return err
		}
		for _, f := range figs {
			b, err := render(f, "png")
			if err != nil {
				return fmt.Errorf("%s.png: %w", f.name, err)
			}
			if err := os.WriteFile(filepath.Join(png, f.name+".png"), b, 0o644); err != nil {
				return err
			}
		}
		fmt.Println("wrote PNGs to", png)
	}
	for _, n := range []string{"phases", "single", "many-clients", "retry-after"} {
		fmt.Printf("\n## %s\n\n%s", n, r.blocks[n])
	}
	return nil
}
