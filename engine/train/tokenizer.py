"""Byte-level BPE with Qwen2.5-Coder's pre-tokenizer and special tokens.

The pipeline (NFC, Qwen2's split regex, byte-level without regex) is the one a
real Qwen2.5-Coder tokenizer.json has, so one tokenizer code path in the
server serves this model and real ones.
"""
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

SPECIAL = ["<|endoftext|>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>",
           "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>"]
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def train_tokenizer(texts, vocab_size):
    """A tokenizer of exactly vocab_size ids (special tokens 0..6 included) trained on the texts."""
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, special_tokens=SPECIAL, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer, length=len(texts))
    return tok


def save_tokenizer(tok, folder, max_length):
    """tokenizer.json + tokenizer_config.json, written the way transformers writes them."""
    from transformers import PreTrainedTokenizerFast
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=SPECIAL[0], pad_token=SPECIAL[0],
                                   additional_special_tokens=SPECIAL[1:], model_max_length=max_length,
                                   clean_up_tokenization_spaces=False)
    fast.save_pretrained(folder)
    # Compact JSON: the pretty-printed file is twice the size, and the bundle carries it twice (draft/).
    fast.backend_tokenizer.save(f"{folder}/tokenizer.json", pretty=False)
    return fast


def load_tokenizer(folder):
    return Tokenizer.from_file(f"{folder}/tokenizer.json")
