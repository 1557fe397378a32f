// Package client is reverie's Go client for the Reverb wire protocol.
//
// It currently provides the data layer that every Reverb client needs:
//
//   - [Tensor], a dense n-dimensional array tagged with a TensorFlow
//     [DType], with constructors from and accessors to Go slices and the
//     row helpers [Stack], [Concat], [Slice], [Row] and [Squeeze0];
//   - [EncodeTensor] and [DecodeTensor], which convert between a [Tensor]
//     and the tensorflow.TensorProto form that Reverb clients put into
//     chunks (raw Snappy block compression, optional delta encoding of
//     integer tensors, TensorFlow's string-list layout for DT_STRING);
//   - [EncodeChunk] and [DecodeChunk], which build and read the
//     deepmind.reverb.ChunkData messages that the server stores and returns
//     verbatim.
//
// The encoding follows Reverb's C++ client (reverb/cc/tensor_compression.cc,
// chunker.cc and writer.cc), so chunks written here can be read by Reverb's
// Python/C++ datasets and samplers and vice versa. The writer, sampler and
// connection pool built on top of this layer are not part of the package yet.
package client
