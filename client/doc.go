// Package client is reverie's Go client for the Reverb wire protocol. It
// talks to reverie and to Reverb's own server alike.
//
// Connect with [Dial], then:
//
//   - write trajectories with a [TrajectoryWriter] ([Client.NewTrajectoryWriter]):
//     Append steps, reference recent steps through [TrajectoryWriter.History],
//     and CreateItem over them; Flush and EndEpisode wait for the server's
//     confirmations. The number of unconfirmed items is bounded, so a slow
//     server blocks the writer instead of growing its memory, and after a
//     reconnect unconfirmed items are re-sent with the same keys;
//   - read samples with a [Sampler] ([Client.NewSampler]) as a Go iterator
//     of decoded samples ([Sampler.Samples]) or of stacked batches
//     ([Sampler.Batches]);
//   - call [Client.ServerInfo], [Client.Insert], [Client.MutatePriorities],
//     [Client.Reset] and [Client.Checkpoint].
//
// Underneath, [Tensor] is a dense n-dimensional array tagged with a
// TensorFlow [DType], and [EncodeChunk] and [DecodeChunk] build and read
// the chunks the server stores, bit-exact with Reverb's C++ client (raw
// Snappy block compression, optional delta encoding of integer tensors,
// TensorFlow's string-list layout for strings).
//
// # Errors
//
// Every blocking call takes a context and returns its error (context.Canceled
// or context.DeadlineExceeded) when it ends first. Other failures wrap one
// of the package's sentinel errors, to be tested with errors.Is:
// [ErrTableNotFound], [ErrInvalidArgument], [ErrFailedPrecondition],
// [ErrRateLimiterTimeout], [ErrUnavailable], [ErrClosed] and [ErrServer].
// The wrapping [*Error] also carries the gRPC code and the server's message.
//
// A Client, and each writer and sampler, is safe for concurrent use.
package client
