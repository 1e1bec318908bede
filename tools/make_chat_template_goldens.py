#!/usr/bin/env python3
"""Writes tests/data/chat_template/<fixture>.json: chats rendered by transformers' own
apply_chat_template (Jinja2 with transformers' settings) with the real chat template of each
fixture tokenizer (tests/fixtures/tokenizers/<fixture>/tokenizer_config.json), and the ids it
tokenizes the rendering to. chat_template_test.cpp renders the same chats with dayzero's engine
and encodes them with dayzero's tokenizer; both must equal these byte for byte and id for id.
A chat the template refuses (raise_exception, or a render error) is recorded as an error, which
dayzero must also refuse. Not a test itself.
Run (with transformers and jinja2 from PyPI): python3 tools/make_chat_template_goldens.py [--out DIR]

It also writes tests/data/chat_template/llava.json: llava-1.5's processor template
(tests/fixtures/configs/llava-1.5-7b-hf/chat_template.json, which reads a message's content as a
list of parts) rendered by transformers' render_jinja_template, the function both tokenizers' and
processors' apply_chat_template call; text only (the fixtures have no llava tokenizer).

The templates of the other families dayzero runs (Kimi-K2/K2.5, GLM-5, Qwen3.5, Mistral,
Llama-3, DeepSeek-V3.2/V4, gpt-oss) are not in the repository's fixtures, so they have no
goldens here.
"""

import argparse
import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import jinja2  # noqa: E402
import transformers  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402

MAGIC = "dayzero-chat-template-golden"
FORMAT_VERSION = 1
FIXTURES = ["qwen3", "deepseek_v3"]

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "The city's name"}},
                       "required": ["city"]},
    },
}
TOOL_CALL = {"id": "call_0", "type": "function",
             "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}

# (name, messages, extra apply_chat_template arguments)
CHATS = [
    ("user", [{"role": "user", "content": "What is the capital of France?"}], {}),
    ("system", [{"role": "system", "content": "You are a terse assistant."},
                {"role": "user", "content": "Hello!"}], {}),
    ("multi_turn", [{"role": "system", "content": "Be brief."},
                    {"role": "user", "content": "Name a colour."},
                    {"role": "assistant", "content": "Blue."},
                    {"role": "user", "content": "Another, in French — s'il vous plaît ☺"}], {}),
    ("reasoning", [{"role": "user", "content": "2 + 2?"},
                   {"role": "assistant", "content": "4", "reasoning_content": "Two and two make four."},
                   {"role": "user", "content": "And 3 + 3?"}], {}),
    ("tools", [{"role": "user", "content": "What is the weather in Paris?"}], {"tools": [WEATHER_TOOL]}),
    ("tool_result", [{"role": "system", "content": "Use tools when they help."},
                     {"role": "user", "content": "What is the weather in Paris?"},
                     {"role": "assistant", "content": "", "tool_calls": [TOOL_CALL]},
                     {"role": "tool", "tool_call_id": "call_0", "content": "{\"temperature\": 21, \"sky\": \"clear\"}"}],
     {"tools": [WEATHER_TOOL]}),
    ("tool_call_null_content", [{"role": "user", "content": "Weather in Paris?"},
                                {"role": "assistant", "content": None, "tool_calls": [TOOL_CALL]},
                                {"role": "tool", "tool_call_id": "call_0", "content": "sunny"}],
     {"tools": [WEATHER_TOOL]}),
    ("no_thinking", [{"role": "user", "content": "Hi"}], {"enable_thinking": False}),
    ("assistant_first", [{"role": "assistant", "content": "Hello, how can I help?"},
                         {"role": "user", "content": "Tell me a joke."}], {}),
]


# Processor templates read content as parts ({"type": "text" | "image"}).
PART_CHATS = [
    ("image_question", [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What is in this picture?"}]}]),
    ("multi_turn", [{"role": "user", "content": [{"type": "text", "text": "Describe"}, {"type": "image"}]},
                    {"role": "assistant", "content": [{"type": "text", "text": "A cat on a mat."}]},
                    {"role": "user", "content": [{"type": "text", "text": "What colour is it?"}]}]),
    ("system_two_images", [{"role": "system", "content": [{"type": "text", "text": "Answer briefly."}]},
                           {"role": "user", "content": [{"type": "image"}, {"type": "image"},
                                                        {"type": "text", "text": "Compare them."}]}]),
]


def write_parts_golden(root, out_dir):
    from transformers.utils.chat_template_utils import render_jinja_template
    rel = "tests/fixtures/configs/llava-1.5-7b-hf/chat_template.json"
    with open(os.path.join(root, rel), encoding="utf-8") as f:
        template = json.load(f)["chat_template"]
    cases = []
    for name, messages in PART_CHATS:
        for gen in (True, False):
            rendered, _ = render_jinja_template(conversations=[messages], chat_template=template,
                                                add_generation_prompt=gen)
            cases.append({"chat": name, "messages": messages, "add_generation_prompt": gen, "text": rendered[0]})
    out = {"magic": MAGIC, "format_version": FORMAT_VERSION, "fixture": "llava", "template_file": rel,
           "generator": f"transformers {transformers.__version__}, jinja2 {jinja2.__version__}",
           "special_tokens": {}, "cases": cases}
    path = os.path.join(out_dir, "llava.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"{path}: {len(cases)} renderings", file=sys.stderr)


def main():
    ap = argparse.ArgumentParser()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--fixtures", default=os.path.join(root, "tests", "fixtures", "tokenizers"))
    ap.add_argument("--out", default=os.path.join(root, "tests", "data", "chat_template"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for fixture in FIXTURES:
        tok = AutoTokenizer.from_pretrained(os.path.join(args.fixtures, fixture))
        cases = []
        for name, messages, extra in CHATS:
            for gen in (True, False):
                case = {"chat": name, "messages": messages, "add_generation_prompt": gen}
                kwargs = dict(extra)
                tools = kwargs.pop("tools", None)
                if tools is not None:
                    case["tools"] = tools
                if kwargs:
                    case["kwargs"] = kwargs
                try:
                    case["text"] = tok.apply_chat_template(messages, tools=tools, add_generation_prompt=gen,
                                                           tokenize=False, **kwargs)
                    case["ids"] = tok.apply_chat_template(messages, tools=tools, add_generation_prompt=gen,
                                                          tokenize=True, return_dict=False, **kwargs)
                    if isinstance(case["ids"], dict):
                        case["ids"] = case["ids"]["input_ids"]
                except (jinja2.TemplateError, TypeError, ValueError) as e:
                    case["error"] = f"{type(e).__name__}: {e}"
                cases.append(case)
        # The variables apply_chat_template gives the template besides the chat (special_tokens_map).
        specials = {k: v for k, v in tok.special_tokens_map.items() if isinstance(v, str)}
        out = {"magic": MAGIC, "format_version": FORMAT_VERSION, "fixture": fixture,
               "generator": f"transformers {transformers.__version__}, jinja2 {jinja2.__version__}",
               "special_tokens": specials, "cases": cases}
        path = os.path.join(args.out, fixture + ".json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(out, f, ensure_ascii=False, indent=1)
            f.write("\n")
        n_err = sum("error" in c for c in cases)
        print(f"{path}: {len(cases)} renderings ({n_err} refused by the template)", file=sys.stderr)
    write_parts_golden(root, args.out)


if __name__ == "__main__":
    main()
