#pragma once
// Which token ids contain a newline, read from a Hugging Face tokenizer.json. The
// soft deadline ends a completion at such a token, so a late answer is still whole lines.
#include <cstdint>
#include <filesystem>
#include <vector>

namespace runahead {

// Byte-level BPE spells "\n" as "Ċ"; SentencePiece byte fallback as "<0x0A>". Scans
// model.vocab and added_tokens. Returns sorted ids; throws EngineError{"model_error"}
// naming the file and field when the file is not a tokenizer.json or holds an id outside
// [0, vocab_size).
std::vector<int32_t> newline_tokens_from_tokenizer(const std::filesystem::path& tokenizer_json, int vocab_size);

// The same from a GGUF file's tokenizer.ggml.tokens (ids are positions in that list; those
// at or past vocab_size are refused naming the key). Empty when the file has no token list.
std::vector<int32_t> newline_tokens_from_gguf(const std::filesystem::path& gguf, int vocab_size);

}  // namespace runahead
