package remote

import (
	"github.com/space-sandbox/space/internal/agentproto"
	"github.com/space-sandbox/space/internal/workerpb"
)

// Conversions of the guest's types (agentproto) to and from the wire's.

func processSpecToPB(s agentproto.ProcessSpec) *workerpb.ProcessSpec {
	p := &workerpb.ProcessSpec{
		Id: s.ID, Argv: s.Argv, Shell: s.Shell, Cwd: s.Cwd, Env: s.Env, User: s.User, Stdin: s.Stdin,
		TimeoutSeconds: int64(s.TimeoutSeconds), BufferBytes: int64(s.BufferBytes),
	}
	if s.PTY != nil {
		p.Pty = &workerpb.PTY{Rows: uint32(s.PTY.Rows), Cols: uint32(s.PTY.Cols)}
	}
	return p
}

func processSpecFromPB(p *workerpb.ProcessSpec) agentproto.ProcessSpec {
	s := agentproto.ProcessSpec{
		ID: p.GetId(), Argv: p.GetArgv(), Shell: p.GetShell(), Cwd: p.GetCwd(), Env: p.GetEnv(), User: p.GetUser(),
		Stdin: p.GetStdin(), TimeoutSeconds: int(p.GetTimeoutSeconds()), BufferBytes: int(p.GetBufferBytes()),
	}
	if p.GetPty() != nil {
		s.PTY = &agentproto.PTY{Rows: clampU16(p.GetPty().GetRows()), Cols: clampU16(p.GetPty().GetCols())}
	}
	return s
}

// clampU16 keeps a terminal size the wire carries as uint32 in uint16's
// range (the agent refuses sizes that make no sense; a wrapped one might
// look sensible).
func clampU16(v uint32) uint16 {
	if v > 0xffff {
		return 0xffff
	}
	return uint16(v)
}

func exitToPB(e *agentproto.ExitStatus) *workerpb.ExitStatus {
	if e == nil {
		return nil
	}
	p := &workerpb.ExitStatus{Signal: e.Signal, Reason: e.Reason, EndedAt: timeToPB(e.EndedAt)}
	if e.ExitCode != nil {
		c := int32(*e.ExitCode)
		p.ExitCode = &c
	}
	return p
}

func exitFromPB(p *workerpb.ExitStatus) *agentproto.ExitStatus {
	if p == nil {
		return nil
	}
	e := &agentproto.ExitStatus{Signal: p.GetSignal(), Reason: p.GetReason(), EndedAt: timeFromPB(p.GetEndedAt())}
	if p.ExitCode != nil {
		c := int(p.GetExitCode())
		e.ExitCode = &c
	}
	return e
}

func processToPB(i agentproto.ProcessInfo) *workerpb.ProcessInfo {
	return &workerpb.ProcessInfo{
		Id: i.ID, Pid: int64(i.PID), State: i.State, StartedAt: timeToPB(i.StartedAt), Exit: exitToPB(i.Exit),
		LastSeq: i.LastSeq,
	}
}

func processFromPB(p *workerpb.ProcessInfo) agentproto.ProcessInfo {
	return agentproto.ProcessInfo{
		ID: p.GetId(), PID: int(p.GetPid()), State: p.GetState(), StartedAt: timeFromPB(p.GetStartedAt()),
		Exit: exitFromPB(p.GetExit()), LastSeq: p.GetLastSeq(),
	}
}

func eventToPB(e agentproto.Event) *workerpb.Event {
	return &workerpb.Event{
		Seq: e.Seq, Type: e.Type, Time: timeToPB(e.Time), Pid: int64(e.PID), Data: e.Data, LostBytes: e.LostBytes,
		Exit: exitToPB(e.Exit),
	}
}

func eventFromPB(p *workerpb.Event) agentproto.Event {
	return agentproto.Event{
		Seq: p.GetSeq(), Type: p.GetType(), Time: timeFromPB(p.GetTime()), PID: int(p.GetPid()), Data: p.GetData(),
		LostBytes: p.GetLostBytes(), Exit: exitFromPB(p.GetExit()),
	}
}

func fileToPB(f agentproto.FileInfo) *workerpb.FileInfo {
	return &workerpb.FileInfo{Name: f.Name, Type: f.Type, Size: f.Size, Mode: f.Mode, Mtime: timeToPB(f.MTime)}
}

func fileFromPB(p *workerpb.FileInfo) agentproto.FileInfo {
	return agentproto.FileInfo{
		Name: p.GetName(), Type: p.GetType(), Size: p.GetSize(), Mode: p.GetMode(), MTime: timeFromPB(p.GetMtime()),
	}
}

func portToPB(p agentproto.ListeningPort) *workerpb.ListeningPort {
	return &workerpb.ListeningPort{Port: uint32(p.Port), Address: p.Address}
}

func portFromPB(p *workerpb.ListeningPort) agentproto.ListeningPort {
	return agentproto.ListeningPort{Port: clampU16(p.GetPort()), Address: p.GetAddress()}
}
