// Package protocol is the fsdpbench plugin protocol as go-plugin sees it: the
// handshake, and backends.Backend on both ends of the gRPC connection (the plugin
// serves a Backend; the host gets a Client). Plugin authors use plugins/sdk and the
// host uses plugins; neither needs this package directly.
package protocol

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fsdpbench/fsdpbench/backends"
	"github.com/fsdpbench/fsdpbench/backends/contract"
	pb "github.com/fsdpbench/fsdpbench/plugins/proto"
	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// Version is the protocol version this build speaks. Raise it when a change to
// backend.proto or to the meaning of its JSON payloads would break plugins built
// against the previous one; go-plugin then refuses the mismatch at the handshake.
const Version = 1

// Bounds of what the host takes from a plugin: a reply past them is refused (or a
// text cut, saying so) before anything else reads it, so a broken or hostile
// plugin costs one call, not the host's memory (a 64 MB description once took
// `fsdpbench backends` to 5.1 GB and an out-of-memory death).
const (
	// MaxReplyBytes bounds a Describe or Validate reply, as gRPC receives it.
	MaxReplyBytes = 1 << 20
	// MaxRunMessageBytes bounds each message of a Run's stream; the last carries
	// the whole result, steps included (a million steps is some 100 MB).
	MaxRunMessageBytes = 256 << 20
	// MaxTextBytes bounds a description's summary and reason, and a refusal.
	MaxTextBytes = 4 << 10
	// maxNameBytes bounds a name: the backend's, an axis's, an axis value, an
	// event's kind, stream or status.
	maxNameBytes = 256
	// maxAxes and maxAxisValues bound a description's axes.
	maxAxes       = 64
	maxAxisValues = 4096
)

// PluginName is the one plugin kind a plugin binary serves.
const PluginName = "backend"

// Handshake is what host and plugin must agree on before they talk. The magic
// cookie only keeps a plugin binary from being run by hand (it says so); it is not
// a security measure: plugins.lock is.
var Handshake = plugin.HandshakeConfig{
	ProtocolVersion:  Version,
	MagicCookieKey:   "FSDPBENCH_PLUGIN",
	MagicCookieValue: "fsdpbench-backend-7c4e1d2a",
}

// Plugins is the plugin set of this protocol version, keyed by version as go-plugin's
// VersionedPlugins wants it. impl is the served backend (nil on the host).
func Plugins(impl backends.Backend) map[int]plugin.PluginSet {
	return map[int]plugin.PluginSet{Version: {PluginName: &Plugin{Impl: impl}}}
}

// Plugin binds backends.Backend to go-plugin's gRPC transport.
type Plugin struct {
	plugin.NetRPCUnsupportedPlugin
	// Impl is the backend a plugin serves; the host leaves it nil.
	Impl backends.Backend
	// Logger receives the server's own errors (a panicking backend); nil is silent.
	Logger hclog.Logger
}

// GRPCServer registers the backend on the plugin's gRPC server.
func (p *Plugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	if p.Impl == nil {
		return errors.New("fsdpbench plugin: no backend to serve (Plugin.Impl is nil)")
	}
	logger := p.Logger
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	pb.RegisterBackendServer(s, &server{b: p.Impl, log: logger})
	return nil
}

// GRPCClient returns the host's *Client over conn.
func (p *Plugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, conn *grpc.ClientConn) (any, error) {
	return &Client{c: pb.NewBackendClient(conn)}, nil
}

// server adapts a backends.Backend to the generated service.
type server struct {
	pb.UnimplementedBackendServer
	b   backends.Backend
	log hclog.Logger
}

func (s *server) Describe(ctx context.Context, _ *pb.DescribeRequest) (resp *pb.DescribeResponse, err error) {
	defer s.recover("Describe", &err)
	d, err := s.b.Describe(ctx)
	if err != nil {
		return nil, err
	}
	data, err := json.Marshal(d)
	if err != nil {
		return nil, fmt.Errorf("encoding the description: %w", err)
	}
	return &pb.DescribeResponse{DescriptionJson: data}, nil
}

func (s *server) Validate(ctx context.Context, req *pb.ValidateRequest) (resp *pb.ValidateResponse, err error) {
	defer s.recover("Validate", &err)
	var rc sweeps.RunConfig
	if err := json.Unmarshal(req.RunConfigJson, &rc); err != nil {
		return nil, fmt.Errorf("decoding the run config from the host: %w", err)
	}
	resp = &pb.ValidateResponse{}
	if verr := s.b.Validate(ctx, rc); verr != nil {
		resp.Refusal = verr.Error()
		resp.SpecError = backends.IsSpecError(verr)
		if resp.Refusal == "" {
			resp.Refusal = "refused without a reason (the backend's Validate returned an empty error)"
		}
	}
	return resp, nil
}

// recover turns a panic in a backend method into that call's error, with the stack
// in the plugin's log: the host then fails the one run instead of losing the plugin.
func (s *server) recover(method string, err *error) {
	if p := recover(); p != nil {
		s.log.Error("backend panicked", "method", method, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
		*err = fmt.Errorf("the plugin's backend panicked in %s: %v", method, p)
	}
}

// Run streams the backend's events and output, then its result. Sends are
// serialized (emit and the log writers may be called from any goroutine) and stop
// when the handler returns: gRPC forbids sending after that.
func (s *server) Run(req *pb.RunRequest, stream pb.Backend_RunServer) (err error) {
	var rc sweeps.RunConfig
	if err := json.Unmarshal(req.RunConfigJson, &rc); err != nil {
		return fmt.Errorf("decoding the run config from the host: %w", err)
	}
	var env backends.RunEnv
	if err := json.Unmarshal(req.RunEnvJson, &env); err != nil {
		return fmt.Errorf("decoding the run environment from the host: %w", err)
	}
	var (
		mu      sync.Mutex
		closed  bool
		sendErr error
	)
	send := func(m *pb.RunMessage) error {
		mu.Lock()
		defer mu.Unlock()
		if closed {
			return errors.New("the run has returned")
		}
		if sendErr == nil {
			sendErr = stream.Send(m)
		}
		return sendErr
	}
	env.Stdout = outputWriter{stream: "stdout", send: send}
	env.Stderr = outputWriter{stream: "stderr", send: send}
	emit := func(ev backends.Event) { _ = send(&pb.RunMessage{Body: &pb.RunMessage_Event{Event: EventToPB(ev)}}) }

	res, runErr := func() (res results.Result, err error) {
		defer s.recover("Run", &err)
		return s.b.Run(stream.Context(), rc, env, emit)
	}()
	done := &pb.Done{}
	if runErr != nil {
		done.Error = runErr.Error()
	}
	if done.ResultJson, err = json.Marshal(res); err != nil {
		return fmt.Errorf("encoding the result: %w", err)
	}
	err = send(&pb.RunMessage{Body: &pb.RunMessage_Done{Done: done}})
	mu.Lock()
	closed = true
	mu.Unlock()
	return err
}

// outputWriter sends what a backend writes to RunEnv.Stdout or Stderr to the host.
type outputWriter struct {
	stream string
	send   func(*pb.RunMessage) error
}

func (w outputWriter) Write(p []byte) (int, error) {
	// gRPC may keep the message after Send returns: send a copy.
	data := append([]byte(nil), p...)
	if err := w.send(&pb.RunMessage{Body: &pb.RunMessage_Output{Output: &pb.Output{Stream: w.stream, Data: data}}}); err != nil {
		return 0, err
	}
	return len(p), nil
}

// EventToPB converts an event for the wire.
func EventToPB(ev backends.Event) *pb.Event {
	out := &pb.Event{
		Kind:      string(ev.Kind),
		Rank:      int64(ev.Rank),
		Step:      int64(ev.Step),
		Loss:      ev.Loss,
		StepTimeS: ev.StepTimeS,
		Tokens:    ev.Tokens,
		Stream:    ev.Stream,
		Line:      ev.Line,
		Status:    string(ev.Status),
	}
	if !ev.Time.IsZero() {
		out.TimeUnixNano = ev.Time.UnixNano()
	}
	return out
}

// EventFromPB converts an event from the wire.
func EventFromPB(e *pb.Event) backends.Event {
	ev := backends.Event{
		Kind:      backends.EventKind(e.GetKind()),
		Rank:      int(e.GetRank()),
		Step:      int(e.GetStep()),
		Loss:      e.Loss,
		StepTimeS: e.GetStepTimeS(),
		Tokens:    e.GetTokens(),
		Stream:    e.GetStream(),
		Line:      e.GetLine(),
		Status:    results.Status(e.GetStatus()),
	}
	if e.GetTimeUnixNano() != 0 {
		ev.Time = time.Unix(0, e.GetTimeUnixNano())
	}
	return ev
}

// BackendError is the error a plugin's backend returned from Run (a failure of the
// backend itself, such as bad options), as opposed to a failure to reach it.
type BackendError struct{ Msg string }

func (e *BackendError) Error() string { return e.Msg }

// Client is the host's end: backends.Backend's methods over the connection, except
// that Validate separates the backend's refusal from a failure to ask.
type Client struct {
	c pb.BackendClient
}

// Describe asks the plugin to describe its backend. A reply past MaxReplyBytes,
// or a field past its bound (DecodeDescription), is an error.
func (c *Client) Describe(ctx context.Context) (backends.Description, error) {
	resp, err := c.c.Describe(ctx, &pb.DescribeRequest{}, grpc.MaxCallRecvMsgSize(MaxReplyBytes))
	if err != nil {
		return backends.Description{}, tooLarge("describe", err)
	}
	return DecodeDescription(resp.GetDescriptionJson())
}

// DecodeDescription reads a plugin's description (the description_json of its
// Describe reply) and checks every field against its bound.
func DecodeDescription(data []byte) (backends.Description, error) {
	var d backends.Description
	if err := json.Unmarshal(data, &d); err != nil {
		return backends.Description{}, fmt.Errorf("the plugin sent an unreadable description: %w", err)
	}
	bad := func(format string, a ...any) (backends.Description, error) {
		return backends.Description{}, fmt.Errorf("the plugin sent a description past the bounds: "+format, a...)
	}
	for _, f := range []struct {
		name, v string
		max     int
	}{{"name", d.Name, maxNameBytes}, {"summary", d.Summary, MaxTextBytes}, {"reason", d.Reason, MaxTextBytes}, {"source", d.Source, MaxTextBytes}} {
		if len(f.v) > f.max {
			return bad("its %s is %d bytes, more than %d", f.name, len(f.v), f.max)
		}
	}
	if len(d.Axes) > maxAxes {
		return bad("%d axes, more than %d", len(d.Axes), maxAxes)
	}
	for k, vs := range d.Axes {
		if len(k) > maxNameBytes {
			return bad("an axis name of %d bytes, more than %d", len(k), maxNameBytes)
		}
		if len(vs) > maxAxisValues {
			return bad("axis %.64q has %d values, more than %d", k, len(vs), maxAxisValues)
		}
		for _, v := range vs {
			if len(v) > maxNameBytes {
				return bad("axis %.64q has a value of %d bytes, more than %d", k, len(v), maxNameBytes)
			}
		}
	}
	return d, nil
}

// CheckEvent bounds an event from a plugin: a log line longer than
// contract.MaxLineBytes is cut as the lines of a process's output are
// (contract.CutLine); a kind, stream or status past maxNameBytes is an error.
func CheckEvent(ev backends.Event) (backends.Event, error) {
	for _, f := range []struct{ name, v string }{{"kind", string(ev.Kind)}, {"stream", ev.Stream}, {"status", string(ev.Status)}} {
		if len(f.v) > maxNameBytes {
			return ev, fmt.Errorf("the plugin sent an event whose %s is %d bytes, more than %d", f.name, len(f.v), maxNameBytes)
		}
	}
	ev.Line = contract.CutLine(ev.Line)
	return ev, nil
}

// tooLarge says plainly that a reply was past its bound (gRPC's ResourceExhausted).
func tooLarge(call string, err error) error {
	if status.Code(err) == codes.ResourceExhausted {
		return fmt.Errorf("its %s reply is larger than the %d bytes a reply may have: %w", call, MaxReplyBytes, err)
	}
	return err
}

// clipText cuts a text from a plugin to MaxTextBytes, saying how long it was.
func clipText(s string) string {
	if len(s) <= MaxTextBytes {
		return s
	}
	return strings.ToValidUTF8(s[:MaxTextBytes], "") + fmt.Sprintf("… (cut: %d bytes in all)", len(s))
}

// Validate returns the backend's refusal of rc (nil when accepted; a
// *backends.SpecError when the backend said the spec is wrong), or err when the
// question could not be asked or answered.
func (c *Client) Validate(ctx context.Context, rc sweeps.RunConfig) (refusal, err error) {
	data, err := json.Marshal(rc)
	if err != nil {
		return nil, fmt.Errorf("encoding the run config: %w", err)
	}
	resp, err := c.c.Validate(ctx, &pb.ValidateRequest{RunConfigJson: data}, grpc.MaxCallRecvMsgSize(MaxReplyBytes))
	if err != nil {
		return nil, tooLarge("validate", err)
	}
	why := clipText(resp.GetRefusal()) // it becomes the run's error
	switch {
	case why == "":
		return nil, nil
	case resp.GetSpecError():
		return backends.SpecErr(errors.New(why)), nil
	}
	return errors.New(why), nil
}

// Run executes one repeat on the plugin: events go to emit, output to env's
// writers. The error is the backend's own (a *BackendError) or the transport's; a
// stream that ends without a Done is an error too.
func (c *Client) Run(ctx context.Context, rc sweeps.RunConfig, env backends.RunEnv, emit func(backends.Event)) (results.Result, error) {
	rcJSON, err := json.Marshal(rc)
	if err != nil {
		return results.Result{}, fmt.Errorf("encoding the run config: %w", err)
	}
	envJSON, err := json.Marshal(env)
	if err != nil {
		return results.Result{}, fmt.Errorf("encoding the run environment: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.c.Run(ctx, &pb.RunRequest{RunConfigJson: rcJSON, RunEnvJson: envJSON})
	if err != nil {
		return results.Result{}, err
	}
	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return results.Result{}, errors.New("the plugin ended the run without a result")
		}
		if err != nil {
			return results.Result{}, err
		}
		switch body := msg.GetBody().(type) {
		case *pb.RunMessage_Event:
			ev, err := CheckEvent(EventFromPB(body.Event))
			if err != nil {
				return results.Result{}, err
			}
			if emit != nil {
				emit(ev)
			}
		case *pb.RunMessage_Output:
			w := env.Stdout
			if body.Output.GetStream() == "stderr" {
				w = env.Stderr
			}
			if w != nil {
				_, _ = w.Write(body.Output.GetData()) // a log that cannot be written must not fail the run
			}
		case *pb.RunMessage_Done:
			var res results.Result
			if err := json.Unmarshal(body.Done.GetResultJson(), &res); err != nil {
				return res, fmt.Errorf("the plugin sent an unreadable result: %w", err)
			}
			if e := body.Done.GetError(); e != "" {
				return res, &BackendError{Msg: e}
			}
			return res, nil
		default:
			return results.Result{}, fmt.Errorf("the plugin sent a message this fsdpbench does not know (%T): is it built for a newer protocol?", body)
		}
	}
}
