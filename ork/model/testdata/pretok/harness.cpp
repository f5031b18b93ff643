// Reference dumper for the pre-tokenizer tests (see gen.py): llama.cpp's unicode_regex_split per
// pre-tokenizer regex set ("split": inputs on stdin, separated as in the .inp files; per set, one line of
// code point lengths per input), the digest of its code point tables ("digest"), the set labels ("sets").
#include "unicode.h"
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>
#include <iostream>
#include <sstream>
#include <iterator>

struct set_t { const char * labels; std::vector<std::string> exprs; bool byte_encode; };
static const std::vector<set_t> sets = {
#include "sets.inc"
};

int main(int argc, char ** argv) {
    if (argc > 1 && !strcmp(argv[1], "digest")) {
        // FNV-1a 64 over, per code point 0..0x10FFFF: flags & 0x1FF (u16 LE), tolower (u32 LE), first NFD code point (u32 LE)
        uint64_t h = 0xcbf29ce484222325ULL;
        auto put = [&](uint32_t v, int n) { for (int i = 0; i < n; i++) { h ^= (v >> (8*i)) & 0xFF; h *= 0x100000001b3ULL; } };
        for (uint32_t c = 0; c < 0x110000; c++) {
            put(unicode_cpt_flags_from_cpt(c).as_uint() & 0x1FF, 2);
            put(unicode_tolower(c), 4);
            put(unicode_cpts_normalize_nfd({c})[0], 4);
        }
        printf("%016llx\n", (unsigned long long) h);
        return 0;
    }
    if (argc > 1 && !strcmp(argv[1], "sets")) {
        for (auto & s : sets) printf("%s\n", s.labels);
        return 0;
    }
    // split: stdin holds inputs separated by "\n__ggml_vocab_test__\n"; output: per set, per input, codepoint lengths
    std::string raw((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
    const std::string sep = "\n__ggml_vocab_test__\n";
    std::vector<std::string> inputs;
    size_t pos = 0;
    while (pos < raw.size()) {
        size_t next = raw.find(sep, pos);
        if (next == std::string::npos) { inputs.push_back(raw.substr(pos)); break; }
        inputs.push_back(raw.substr(pos, next - pos));
        pos = next + sep.size();
    }
    for (auto & s : sets) {
        printf("# %s\n", s.labels);
        for (auto & in : inputs) {
            std::vector<std::string> words;
            try {
                words = unicode_regex_split(in, s.exprs, false);
            } catch (const std::exception & e) {
                printf("ERR %s\n", e.what());
                continue;
            }
            bool first = true;
            for (auto & w : words) {
                size_t n = unicode_cpts_from_utf8(w).size();
                if (n == 0) continue;
                printf(first ? "%zu" : " %zu", n);
                first = false;
            }
            printf("\n");
        }
    }
    return 0;
}
