package server

import (
	"context"
	"errors"
	"io"

	"github.com/reverie-rl/reverie/api/reverbpb"
	"github.com/reverie-rl/reverie/internal/table"
)

// ServerInfo implements ReverbService.
func (s *Server) ServerInfo(ctx context.Context, _ *reverbpb.ServerInfoRequest) (*reverbpb.ServerInfoResponse, error) {
	resp := &reverbpb.ServerInfoResponse{TablesStateId: s.stateID}
	for _, name := range s.names {
		resp.TableInfo = append(resp.TableInfo, s.tables[name].tableInfo())
	}
	return resp, nil
}

func (t *serverTable) tableInfo() *reverbpb.TableInfo {
	info := t.Info()
	ti := &reverbpb.TableInfo{
		Name:            info.Name,
		SamplerOptions:  SelectorSpecToProto(info.Sampler),
		RemoverOptions:  SelectorSpecToProto(info.Remover),
		MaxSize:         info.MaxSize,
		MaxTimesSampled: info.MaxTimesSampled,
		RateLimiterInfo: &reverbpb.RateLimiterInfo{
			SamplesPerInsert: info.RateLimiter.SamplesPerInsert,
			MinDiff:          info.RateLimiter.MinDiff,
			MaxDiff:          info.RateLimiter.MaxDiff,
			MinSizeToSample:  info.RateLimiter.MinSizeToSample,
			InsertStats:      &reverbpb.RateLimiterCallStats{Completed: info.Inserts},
			SampleStats:      &reverbpb.RateLimiterCallStats{Completed: info.Samples},
		},
		CurrentSize:        info.Size,
		NumEpisodes:        info.NumEpisodes,
		NumDeletedEpisodes: info.NumDeletedEpisodes,
		NumUniqueSamples:   info.NumUniqueSamples,
		TableWorkerTime:    &reverbpb.TableWorkerTime{},
	}
	// An absent signature must stay absent: Reverb's client breaks on an
	// empty StructuredValue.
	if t.cfg.Signature != nil {
		ti.Signature = t.cfg.Signature
	}
	return ti
}

// MutatePriorities implements ReverbService.
func (s *Server) MutatePriorities(ctx context.Context, req *reverbpb.MutatePrioritiesRequest) (*reverbpb.MutatePrioritiesResponse, error) {
	t, err := s.table("table", req.GetTable())
	if err != nil {
		return nil, toStatus(err)
	}
	updates := make([]table.KeyPriority, len(req.GetUpdates()))
	for i, u := range req.GetUpdates() {
		updates[i] = table.KeyPriority{Key: u.GetKey(), Priority: u.GetPriority()}
	}
	if err := t.MutatePriorities(updates, req.GetDeleteKeys()); err != nil {
		return nil, toStatus(err)
	}
	if err := s.waitDurable(ctx); err != nil {
		return nil, toStatus(err)
	}
	return &reverbpb.MutatePrioritiesResponse{}, nil
}

// Reset implements ReverbService.
func (s *Server) Reset(ctx context.Context, req *reverbpb.ResetRequest) (*reverbpb.ResetResponse, error) {
	t, err := s.table("table", req.GetTable())
	if err != nil {
		return nil, toStatus(err)
	}
	if err := t.Reset(); err != nil {
		return nil, toStatus(err)
	}
	if err := s.waitDurable(ctx); err != nil {
		return nil, toStatus(err)
	}
	return &reverbpb.ResetResponse{}, nil
}

// InitializeConnection implements ReverbService. Reverb uses it to hand a
// same-process client a raw table pointer; reverie always answers address
// 0, which makes the client fall back to SampleStream.
func (s *Server) InitializeConnection(stream reverbpb.ReverbService_InitializeConnectionServer) error {
	ctx := stream.Context()
	var r recvResult[reverbpb.InitializeConnectionRequest]
	select {
	case r = <-recvLoop(ctx, stream.Recv):
	case <-ctx.Done():
		return toStatus(ctx.Err()) // see recvLoop
	case <-s.closing:
		// A client that opened the call and sent nothing must not hold
		// up a drain.
		return toStatus(errShuttingDown)
	}
	if r.err != nil {
		if errors.Is(r.err, io.EOF) {
			return nil
		}
		return r.err
	}
	return stream.Send(&reverbpb.InitializeConnectionResponse{Address: 0})
}
