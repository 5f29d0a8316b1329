//go:build ignore

// vulnfilter reads govulncheck's JSON stream and fails when the code calls
// a vulnerable symbol of a required module. Standard library findings are
// listed, not failed: they are fixed by the Go release users build with.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
)

type frame struct {
	Module   string `json:"module"`
	Version  string `json:"version"`
	Package  string `json:"package"`
	Function string `json:"function"`
}

type message struct {
	Finding *struct {
		OSV          string  `json:"osv"`
		FixedVersion string  `json:"fixed_version"`
		Trace        []frame `json:"trace"`
	} `json:"finding"`
}

func main() {
	called := map[string]frame{} // OSV ID to the vulnerable frame
	fixed := map[string]string{}
	dec := json.NewDecoder(os.Stdin)
	for {
		var m message
		if err := dec.Decode(&m); err == io.EOF {
			break
		} else if err != nil {
			fmt.Fprintln(os.Stderr, "vulnfilter: reading govulncheck output:", err)
			os.Exit(2)
		}
		f := m.Finding
		if f == nil || len(f.Trace) == 0 || f.Trace[0].Function == "" {
			continue // not called from our code
		}
		called[f.OSV] = f.Trace[0]
		fixed[f.OSV] = f.FixedVersion
	}
	ids := make([]string, 0, len(called))
	for id := range called {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	failed := 0
	for _, id := range ids {
		fr := called[id]
		kind := "module"
		if fr.Module == "stdlib" {
			kind = "stdlib (not failed: fixed by a newer Go)"
		} else {
			failed++
		}
		fmt.Printf("  %s: %s %s %s.%s, fixed in %s [%s]\n", id, fr.Module, fr.Version, fr.Package, fr.Function, fixed[id], kind)
	}
	if failed > 0 {
		fmt.Printf("vulnfilter: %d called vulnerabilities in required modules\n", failed)
		os.Exit(1)
	}
	fmt.Printf("vulnfilter: no called vulnerability in a required module (%d in the standard library)\n", len(ids)-failed)
}
