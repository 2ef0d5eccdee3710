// Package input reads files that come from outside the tool (specs, rules files,
// model config.json files, metrics and rank reports, ingested folders) with bounds
// that hold before any parser runs: the file must be a regular file (not
// /dev/zero, a FIFO or a device), at most a stated size, and a YAML or JSON
// document must not nest deeper, nor (YAML) expand through aliases to more values,
// than its format's limits. A parser given a few kilobytes of nested brackets or an
// alias bomb can take gigabytes; these checks take time and memory linear in the
// file's size.
//
// It is a leaf package (it imports nothing of fsdpbench) so every reader can use it.
package input

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"
	"github.com/goccy/go-yaml/scanner"
	"github.com/goccy/go-yaml/token"
)

// Limits bound one kind of input. A zero field means no bound on that measure.
type Limits struct {
	// What names the kind of file in errors ("sweep spec", "rules file").
	What string
	// MaxBytes bounds the file's size.
	MaxBytes int64
	// MaxDepth bounds nesting: lists and mappings inside each other (YAML block
	// indentation and flow brackets alike; JSON arrays and objects).
	MaxDepth int
	// MaxValues bounds a YAML document's values once its aliases are expanded
	// (every scalar, list and mapping counts one), which is what a decoder builds.
	MaxValues int
	// MaxAliases bounds the number of aliases (*name) in a YAML document.
	MaxAliases int
	// MaxKeys bounds the keys of one YAML mapping.
	MaxKeys int
	// MaxTokens bounds a YAML document's tokens (scalars, brackets, indicators):
	// goccy/go-yaml's parser holds some hundreds of bytes per token.
	MaxTokens int
	// UniqueKeys refuses a JSON object that gives a key twice (CheckJSON). Files
	// people write or edit set it; a profiler's trace does not (Chrome's tracer
	// repeats keys in an event's args, and a trace is read, not trusted, per span).
	UniqueKeys bool
}

// The limits of each kind of outside file. Each is far above what a real file of
// its kind holds, and low enough that reading the worst file allowed costs at most
// some tens of megabytes and a fraction of a second.
var (
	// Spec bounds a sweep spec: 256 KiB is some 5,000 include entries; 200,000
	// values with aliases expanded is some 40 MB once options and the resolved
	// spec are built from them (a million took 400 MB).
	Spec = Limits{What: "sweep spec", MaxBytes: 256 << 10, MaxDepth: 32, MaxValues: 200_000, MaxAliases: 10_000, MaxKeys: 1000, MaxTokens: 100_000}
	// Rules bounds a gate rules file: a list of rule strings.
	Rules = Limits{What: "rules file", MaxBytes: 64 << 10, MaxDepth: 16, MaxValues: 100_000, MaxAliases: 1_000, MaxKeys: 1000, MaxTokens: 50_000}
	// ModelConfig bounds a Hugging Face config.json (a few kilobytes; label maps
	// of classification heads make some larger).
	ModelConfig = Limits{What: "model config.json", MaxBytes: 16 << 20, MaxDepth: 64, UniqueKeys: true}
	// Metrics bounds a run's metrics: metrics.json, a rank's report (per-step
	// figures of up to a million steps), a script's metrics file.
	Metrics = Limits{What: "metrics file", MaxBytes: 128 << 20, MaxDepth: 64, UniqueKeys: true}
	// RunFile bounds the small JSON files the tool keeps beside runs:
	// run_args.json, manifest.json (an entry per run of a million-run sweep), the
	// plugins lock file.
	RunFile = Limits{What: "JSON file", MaxBytes: 512 << 20, MaxDepth: 64, UniqueKeys: true}
	// Export bounds an `fsdpbench export --format json` file or a results index:
	// a million runs of a few hundred bytes each.
	Export = Limits{What: "results file", MaxBytes: 2 << 30, MaxDepth: 64, UniqueKeys: true}
)

// Error is a file refused by a bound: which file, where (Line and Column are
// 1-based; 0 when the problem is the file as a whole) and why.
type Error struct {
	Path   string
	Line   int
	Column int
	Msg    string
}

// Error formats the problem as path:line:col: message, as compilers do.
func (e *Error) Error() string {
	if e.Line <= 0 {
		return e.Path + ": " + e.Msg
	}
	return fmt.Sprintf("%s:%d:%d: %s", e.Path, e.Line, e.Column, e.Msg)
}

// ReadFile reads the regular file at path, refusing anything else (a FIFO, a
// device such as /dev/zero, a directory) and files larger than lim.MaxBytes.
// Symbolic links are followed (Hugging Face caches link config.json to a blob).
// Errors from opening keep their type, so errors.Is(err, fs.ErrNotExist) works.
func ReadFile(path string, lim Limits) ([]byte, error) {
	// O_NONBLOCK: opening a FIFO for reading otherwise waits for a writer, forever.
	f, err := os.OpenFile(path, os.O_RDONLY|openFlags, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	what := lim.what()
	if !st.Mode().IsRegular() {
		return nil, &Error{Path: path, Msg: fmt.Sprintf("a %s must be a regular file, but this is %s", what, DescribeMode(st.Mode()))}
	}
	if lim.MaxBytes > 0 && st.Size() > lim.MaxBytes {
		return nil, tooBig(path, what, st.Size(), lim.MaxBytes)
	}
	r := io.Reader(f)
	if lim.MaxBytes > 0 {
		// A file can grow while it is read, and /proc files report size 0.
		r = io.LimitReader(f, lim.MaxBytes+1)
	}
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if lim.MaxBytes > 0 && int64(len(data)) > lim.MaxBytes {
		return nil, tooBig(path, what, int64(len(data)), lim.MaxBytes)
	}
	return data, nil
}

// ReadYAML reads a YAML file (ReadFile) and checks it with CheckYAML.
func ReadYAML(path string, lim Limits) ([]byte, error) {
	data, err := ReadFile(path, lim)
	if err != nil {
		return nil, err
	}
	if err := CheckYAML(path, data, lim); err != nil {
		return nil, err
	}
	return data, nil
}

// ReadJSON reads a JSON file (ReadFile), drops a UTF-8 byte order mark
// (TrimBOM: a file saved by a Windows editor is still JSON) and checks it with
// CheckJSON.
func ReadJSON(path string, lim Limits) ([]byte, error) {
	data, err := ReadFile(path, lim)
	if err != nil {
		return nil, err
	}
	data = TrimBOM(data)
	if err := CheckJSON(path, data, lim); err != nil {
		return nil, err
	}
	return data, nil
}

func (lim Limits) what() string {
	if lim.What == "" {
		return "file"
	}
	return lim.What
}

func tooBig(path, what string, size, limit int64) *Error {
	return &Error{Path: path, Msg: fmt.Sprintf("the %s is %s, more than the %s a %s may have; is it the right file?",
		what, sizeString(size), sizeString(limit), what)}
}

// sizeString formats a byte count the way ls -h would, exact below 1 KiB.
func sizeString(n int64) string {
	switch {
	case n >= 1<<30:
		return strconv.FormatFloat(float64(n)/(1<<30), 'f', 1, 64) + " GiB"
	case n >= 1<<20:
		return strconv.FormatFloat(float64(n)/(1<<20), 'f', 1, 64) + " MiB"
	case n >= 1<<10:
		return strconv.FormatFloat(float64(n)/(1<<10), 'f', 1, 64) + " KiB"
	}
	return strconv.FormatInt(n, 10) + " bytes"
}

// DescribeMode says what a file of mode m is, for a message that refuses it:
// "a directory", "a FIFO (named pipe)", "a block device"... The spec reader,
// report --timeline and the --results check all say it in these words.
func DescribeMode(m os.FileMode) string {
	switch {
	case m.IsRegular():
		return "a file"
	case m.IsDir():
		return "a directory"
	case m&os.ModeSymlink != 0:
		return "a symbolic link"
	case m&os.ModeNamedPipe != 0:
		return "a FIFO (named pipe)"
	case m&os.ModeSocket != 0:
		return "a socket"
	case m&os.ModeCharDevice != 0:
		return "a character device"
	case m&os.ModeDevice != 0:
		return "a block device"
	}
	return "not a regular file (mode " + m.String() + ")"
}

// CheckJSON checks that data, a JSON document, nests at most lim.MaxDepth deep
// and is at most lim.MaxBytes long, and with lim.UniqueKeys that no object gives
// a key twice. It scans the bytes once for depth (brackets outside strings),
// without allocating, so a 100 MB rank report costs milliseconds, and once more
// for keys, holding those of the objects open at the time. Malformed JSON is not
// its business: the caller's parser reports it in its own words (a rank report
// with NaN is a result, not a malformed file).
func CheckJSON(path string, data []byte, lim Limits) error {
	if lim.MaxBytes > 0 && int64(len(data)) > lim.MaxBytes {
		return tooBig(path, lim.what(), int64(len(data)), lim.MaxBytes)
	}
	if err := checkJSONDepth(path, data, lim); err != nil {
		return err
	}
	if lim.UniqueKeys {
		// After the depth check: the key scan's stack is then bounded.
		return checkDuplicateKeys(path, data)
	}
	return nil
}

// checkJSONDepth is CheckJSON's bound on nesting.
func checkJSONDepth(path string, data []byte, lim Limits) error {
	if lim.MaxDepth <= 0 {
		return nil
	}
	depth, inString, escaped := 0, false, false
	for i, c := range data {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '[' || c == '{':
			depth++
			if depth > lim.MaxDepth {
				line, col := lineCol(data, int64(i))
				return &Error{Path: path, Line: line, Column: col,
					Msg: fmt.Sprintf("the %s nests arrays and objects deeper than %d levels; no %s needs that many", lim.what(), lim.MaxDepth, lim.what())}
			}
		case c == ']' || c == '}':
			depth--
		}
	}
	return nil
}

// CheckYAML checks that data, a YAML document, stays within lim before a YAML
// parser or decoder sees it: its size, its nesting (estimated from the tokens:
// block indentation levels plus open flow brackets, which is at least the true
// depth of every well-formed document), the number of aliases, and the number of
// values once aliases are expanded (counted over the parsed tree, one visit per
// node, an alias counting the size of what it names). Malformed YAML is left to
// the caller's parser to report: CheckYAML then returns nil.
func CheckYAML(path string, data []byte, lim Limits) error {
	if lim.MaxBytes > 0 && int64(len(data)) > lim.MaxBytes {
		return tooBig(path, lim.what(), int64(len(data)), lim.MaxBytes)
	}
	// As lexer.Tokenize, but checking each batch of tokens as it comes and
	// stopping at the first bound passed: a token takes some hundreds of bytes.
	var sc scanner.Scanner
	sc.Init(string(data))
	var tokens token.Tokens
	var st yamlScan
	for {
		sub, err := sc.Scan()
		if err == io.EOF {
			break
		}
		from := len(tokens)
		tokens.Add(sub...)
		if err := st.check(path, tokens, from, lim); err != nil {
			return err
		}
		if lim.MaxTokens > 0 && len(tokens) > lim.MaxTokens {
			return yamlErr(path, tokens[lim.MaxTokens], "the %s has more than %d YAML tokens (values, brackets, dashes and colons); no %s needs that many", lim.what(), lim.MaxTokens, lim.what())
		}
	}
	if lim.MaxValues <= 0 {
		return nil
	}
	f, err := parser.Parse(tokens, 0, parser.AllowDuplicateMapKey())
	if err != nil {
		return nil // malformed: the caller's parser says where
	}
	c := counter{anchors: map[string]int{}, limit: lim.MaxValues, maxDepth: 4*lim.MaxDepth + 16}
	for _, doc := range f.Docs {
		if doc == nil {
			continue
		}
		c.count(doc.Body, 0)
		if c.over != nil {
			return yamlErr(path, c.over, "the %s expands to more than %d values once its aliases (*name) are expanded; no %s needs that many", lim.what(), lim.MaxValues, lim.what())
		}
	}
	return nil
}

// yamlScan follows a YAML token stream for CheckYAML's bounds.
type yamlScan struct {
	// open holds the open collections: block ones by the column of their
	// entries, flow ones by their bracket; keys counts a mapping's entries so far.
	open    []frame
	flow    int
	aliases int
}

type frame struct {
	col  int
	flow bool
	keys int
}

// check follows tokens[from:], reporting the first bound of lim they pass.
func (st *yamlScan) check(path string, tokens token.Tokens, from int, lim Limits) error {
	for i := from; i < len(tokens); i++ {
		tk := tokens[i]
		if tk == nil || tk.Position == nil {
			continue
		}
		col := tk.Position.Column
		switch tk.Type {
		case token.DocumentHeaderType, token.DocumentEndType:
			st.open, st.flow = st.open[:0], 0
			continue
		case token.SequenceStartType, token.MappingStartType:
			st.flow++
			st.open = append(st.open, frame{flow: true})
		case token.SequenceEndType, token.MappingEndType:
			for len(st.open) > 0 {
				f := st.open[len(st.open)-1]
				st.open = st.open[:len(st.open)-1]
				if f.flow {
					st.flow--
					break
				}
			}
			continue
		case token.AliasType:
			st.aliases++
			if lim.MaxAliases > 0 && st.aliases > lim.MaxAliases {
				return yamlErr(path, tk, "the %s has more than %d aliases (*name); no %s needs that many", lim.what(), lim.MaxAliases, lim.what())
			}
			continue
		case token.SequenceEntryType, token.MappingKeyType, token.MappingValueType:
			if st.flow == 0 {
				if tk.Type == token.MappingValueType && i > 0 && tokens[i-1].Position != nil &&
					tokens[i-1].Position.Line == tk.Position.Line {
					col = tokens[i-1].Position.Column // a mapping's level is its keys' column
				}
				keys := 0
				for len(st.open) > 0 && st.open[len(st.open)-1].col >= col {
					if st.open[len(st.open)-1].col == col {
						keys = st.open[len(st.open)-1].keys // the same collection goes on
					}
					st.open = st.open[:len(st.open)-1]
				}
				st.open = append(st.open, frame{col: col, keys: keys})
			}
			if tk.Type == token.MappingValueType && len(st.open) > 0 {
				top := &st.open[len(st.open)-1]
				top.keys++
				// goccy/go-yaml's parser takes time and memory quadratic in the keys of
				// one block mapping (2 GB for 20,000).
				if lim.MaxKeys > 0 && top.keys > lim.MaxKeys {
					return yamlErr(path, tk, "a mapping of the %s has more than %d keys; no %s needs that many", lim.what(), lim.MaxKeys, lim.what())
				}
			}
			if st.flow > 0 {
				continue
			}
		default:
			continue
		}
		if lim.MaxDepth > 0 && len(st.open) > lim.MaxDepth {
			return yamlErr(path, tk, "the %s nests lists and mappings deeper than %d levels; no %s needs that many", lim.what(), lim.MaxDepth, lim.what())
		}
	}
	return nil
}

func yamlErr(path string, tk *token.Token, format string, args ...any) *Error {
	return &Error{Path: path, Line: tk.Position.Line, Column: tk.Position.Column, Msg: fmt.Sprintf(format, args...)}
}

// counter counts a YAML tree's values with aliases expanded, visiting each node
// once: an anchor's size is remembered and an alias adds it.
type counter struct {
	anchors  map[string]int
	limit    int
	maxDepth int
	total    int
	over     *token.Token // where the count passed the limit
}

// count returns the expanded size of n, stopping (with c.over set) past the limit.
func (c *counter) count(n ast.Node, depth int) int {
	if n == nil || c.over != nil {
		return 0
	}
	size := 1
	if depth > c.maxDepth {
		// Deeper than the token scan allows: only a malformed tree; stop here.
		return size
	}
	switch v := n.(type) {
	case *ast.AnchorNode:
		size = c.count(v.Value, depth+1)
		if v.Name != nil && v.Name.GetToken() != nil {
			c.anchors[v.Name.GetToken().Value] = size
		}
		return size // the values below were added to total already
	case *ast.AliasNode:
		if v.Value != nil && v.Value.GetToken() != nil {
			size = max(c.anchors[v.Value.GetToken().Value], 1)
		}
	case *ast.SequenceNode:
		c.add(1, n)
		for _, it := range v.Values {
			size += c.count(it, depth+1)
		}
		return size
	case *ast.MappingNode:
		c.add(1, n)
		for _, mv := range v.Values {
			size += c.count(mv, depth+1)
		}
		return size
	case *ast.MappingValueNode:
		return c.count(v.Key, depth+1) + c.count(v.Value, depth+1)
	case *ast.TagNode:
		return c.count(v.Value, depth+1)
	}
	c.add(size, n)
	return size
}

func (c *counter) add(k int, n ast.Node) {
	c.total += k
	if c.total > c.limit && c.over == nil {
		c.over = n.GetToken()
		if c.over == nil || c.over.Position == nil {
			c.over = &token.Token{Position: &token.Position{Line: 1, Column: 1}}
		}
	}
}

// lineCol converts a byte offset into a 1-based line and column (in bytes).
func lineCol(data []byte, off int64) (line, col int) {
	off = min(max(off, 0), int64(len(data)))
	before := data[:off]
	line = bytes.Count(before, []byte{'\n'}) + 1
	col = int(off) - (bytes.LastIndexByte(before, '\n') + 1) + 1
	return line, col
}

// Quote renders text from an input file for an error message: quoted and escaped
// (control characters and invalid UTF-8 cannot garble a terminal) and cut to at
// most max characters, with the full length said, so a message never echoes
// kilobytes of a file.
func Quote(s string, max int) string {
	if max <= 0 || utf8.RuneCountInString(s) <= max {
		return strconv.Quote(s)
	}
	n, cut := 0, len(s)
	for i := range s {
		if n == max {
			cut = i
			break
		}
		n++
	}
	return strconv.Quote(s[:cut]) + fmt.Sprintf("… (%d bytes in all)", len(s))
}

// Clip is Quote without the surrounding quotes, for text that a message shows
// bare (a key in a field path, an ID, a number as written).
func Clip(s string, max int) string {
	quoted := Quote(s, max)
	if strings.HasPrefix(quoted, `"`) && strings.HasSuffix(quoted, `"`) {
		return quoted[1 : len(quoted)-1]
	}
	return quoted
}
