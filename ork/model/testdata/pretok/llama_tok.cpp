// llama_tok prints llama.cpp's token ids for each input: the vocabulary of a GGUF (vocab only), the
// inputs on stdin separated as in llama.cpp's .inp files ("\n__ggml_vocab_test__\n"), one output line
// per input (ids separated by spaces, or "ERR" when llama_tokenize fails). argv[2], argv[3]:
// add_special and parse_special (0/1). Build against a llama.cpp build:
//
//	g++ -O2 -std=c++17 -I$LLAMA/include -I$LLAMA/ggml/include llama_tok.cpp -L$LLAMA/build/bin -lllama -Wl,-rpath,$LLAMA/build/bin -o llama_tok
#include "llama.h"
#include <cstdio>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

int main(int argc, char ** argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s VOCAB.gguf ADD_SPECIAL PARSE_SPECIAL < inputs\n", argv[0]);
        return 2;
    }
    llama_log_set([](ggml_log_level, const char *, void *) {}, nullptr);
    llama_backend_init();
    auto mp = llama_model_default_params();
    mp.vocab_only = true;
    llama_model * model = llama_model_load_from_file(argv[1], mp);
    if (!model) {
        fprintf(stderr, "cannot load %s\n", argv[1]);
        return 1;
    }
    const llama_vocab * vocab = llama_model_get_vocab(model);
    const bool add_special = argv[2][0] == '1', parse_special = argv[3][0] == '1';
    std::string raw((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
    const std::string sep = "\n__ggml_vocab_test__\n";
    size_t pos = 0;
    while (pos < raw.size()) {
        size_t next = raw.find(sep, pos);
        if (next == std::string::npos) next = raw.size();
        const std::string in = raw.substr(pos, next - pos);
        pos = next + sep.size();
        std::vector<llama_token> toks(in.size() * 4 + 16);
        int32_t n = -1;
        try {
            n = llama_tokenize(vocab, in.data(), (int32_t) in.size(), toks.data(), (int32_t) toks.size(), add_special, parse_special);
        } catch (...) {
            n = -1;
        }
        if (n < 0) {
            printf("ERR\n");
            continue;
        }
        for (int32_t i = 0; i < n; i++) printf(i ? " %d" : "%d", toks[i]);
        printf("\n");
    }
    llama_model_free(model);
    return 0;
}
