// Chat templates rendered by Jinja2 in an embedded CPython (the Debian system interpreter, isolated
// from the environment's PYTHONPATH / PYTHONHOME and from any other Python on PATH), with the
// environment transformers' apply_chat_template builds: ImmutableSandboxedEnvironment, trim_blocks,
// lstrip_blocks, the loop-controls extension and its {% generation %} tag, its tojson,
// raise_exception, strftime_now, dict and namespace. The interpreter starts on the first compile and
// lives as long as the process; every call into it holds the GIL.
#include "chat/chat_template.h"

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <fstream>
#include <mutex>
#include <sstream>

#include "tokenizer/tokenizer.h"

namespace dayzero::chat {
namespace {

using nlohmann::json;

// transformers' _cached_compile_jinja_template and render_jinja_template's preparation of the
// arguments (_normalize_chat_messages, _alias_reasoning_fields), as transformers 5 writes them.
constexpr const char* kEngine = R"PY(
import datetime, json
import jinja2, jinja2.ext, jinja2.nodes, jinja2.utils
from jinja2.sandbox import ImmutableSandboxedEnvironment

class AssistantTracker(jinja2.ext.Extension):
    tags = {"generation"}
    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_generation_support"), [], [], body).set_lineno(lineno)
    @jinja2.pass_eval_context
    def _generation_support(self, context, caller):
        return caller()

def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)

def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

def strftime_now(format):
    return datetime.datetime.now().strftime(format)

class TemplateDict:
    def __call__(self, *args, **kwargs):
        return dict(*args, **kwargs)
    def fromkeys(self, *args, **kwargs):
        return dict.fromkeys(*args, **kwargs)

class TemplateNamespace(jinja2.utils.Namespace):
    def __init__(*args, **kwargs):
        self, args = args[0], args[1:]
        attrs = dict(*args, **kwargs)
        for name in attrs:
            TemplateNamespace._check_name(name)
        jinja2.utils.Namespace.__init__(self, attrs)
    def __setitem__(self, name, value):
        TemplateNamespace._check_name(name)
        jinja2.utils.Namespace.__setitem__(self, name, value)
    @staticmethod
    def _check_name(name):
        if isinstance(name, str) and name.startswith("_"):
            raise jinja2.exceptions.SecurityError(
                f"Chat templates cannot store underscore-prefixed attributes on a namespace, but got {name!r}. "
                "Please rename the attribute.")

def compile_template(text):
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[AssistantTracker, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    env.globals["dict"] = TemplateDict()
    env.globals["namespace"] = TemplateNamespace
    return env.from_string(text)

def reads_content_parts(text):
    # Whether the template loops over a message's content (a list of {"type": ...} parts, as
    # processor templates read it) rather than using it as a string: a for loop whose iterable,
    # filters aside, is x['content'] or x.content. vLLM's "openai" content format, detected the same way.
    env = ImmutableSandboxedEnvironment(extensions=[AssistantTracker, jinja2.ext.loopcontrols])
    for node in env.parse(text).find_all(jinja2.nodes.For):
        it = node.iter
        while isinstance(it, (jinja2.nodes.Filter, jinja2.nodes.Test)):
            it = it.node
        if isinstance(it, jinja2.nodes.Getitem) and isinstance(it.arg, jinja2.nodes.Const) and it.arg.value == "content":
            return True
        if isinstance(it, jinja2.nodes.Getattr) and it.attr == "content":
            return True
    return False

REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")

def render_template(template, vars_json):
    v = json.loads(vars_json)
    if isinstance(v.get("messages"), list):
        chat = []
        for m in v["messages"]:
            if isinstance(m, dict):
                m = {k: x for k, x in m.items() if x is not None}
                reasoning = next((m[k] for k in REASONING_FIELDS if m.get(k) is not None), None)
                if reasoning is not None:
                    m = {"thinking": reasoning, **m, "reasoning_content": reasoning}
            chat.append(m)
        v["messages"] = chat
    v.setdefault("tools", None)
    v.setdefault("documents", None)
    v.setdefault("add_generation_prompt", False)
    return template.render(**v)

def describe(e):
    line = getattr(e, "lineno", None)
    where = f"line {line}: " if line else ""
    return f"{where}{type(e).__name__}: {e}"
)PY";

struct Engine {
  Status status;
  PyObject* compile = nullptr;   // compile_template(text)
  PyObject* render = nullptr;    // render_template(template, vars_json)
  PyObject* describe = nullptr;  // describe(exception)
  PyObject* parts = nullptr;     // reads_content_parts(text)
};

// The pending Python exception as one line (Jinja2's own message, with its line when it has one);
// clears it. REQUIRES: the GIL.
std::string take_error(const Engine& e) {
  PyObject *type = nullptr, *value = nullptr, *tb = nullptr;
  PyErr_Fetch(&type, &value, &tb);
  PyErr_NormalizeException(&type, &value, &tb);
  std::string out = "unknown error";
  if (value && e.describe) {
    PyObject* s = PyObject_CallOneArg(e.describe, value);
    if (s && PyUnicode_Check(s)) out = PyUnicode_AsUTF8(s);
    Py_XDECREF(s);
    PyErr_Clear();
  } else if (value) {
    PyObject* s = PyObject_Str(value);
    if (s) out = PyUnicode_AsUTF8(s);
    Py_XDECREF(s);
    PyErr_Clear();
  }
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(tb);
  return out;
}

Engine& engine() {
  static Engine e;
  static std::once_flag once;
  std::call_once(once, [] {
    PyConfig config;
    // Isolated: the environment's PYTHONPATH / PYTHONHOME (a pyenv's, a venv's) and user site are
    // not read, and no signal handler is installed (the job's SIGTERM stays dayzero's).
    PyConfig_InitIsolatedConfig(&config);
    PyStatus st = PyConfig_SetBytesString(&config, &config.home, DAYZERO_PYTHON_HOME);
    if (!PyStatus_Exception(st)) st = Py_InitializeFromConfig(&config);
    PyConfig_Clear(&config);
    if (PyStatus_Exception(st)) {
      e.status = Status::Internal(std::string("the embedded Python (") + DAYZERO_PYTHON_HOME + ") did not start: " +
                                  (st.err_msg ? st.err_msg : "unknown error"));
      return;
    }
    PyObject* module = PyModule_New("dayzero_chat_template");
    PyObject* globals = PyModule_GetDict(module);
    PyDict_SetItemString(globals, "__builtins__", PyEval_GetBuiltins());
    PyObject* ran = PyRun_String(kEngine, Py_file_input, globals, globals);
    if (!ran) {
      e.status = Status::InvalidArgument(
          "chat templates are rendered by Jinja2 (Debian's python3-jinja2, installed by tools/install_deps.sh), "
          "which the embedded Python could not load: " + take_error(e));
    } else {
      Py_DECREF(ran);
      e.compile = PyDict_GetItemString(globals, "compile_template");
      e.render = PyDict_GetItemString(globals, "render_template");
      e.describe = PyDict_GetItemString(globals, "describe");
      e.parts = PyDict_GetItemString(globals, "reads_content_parts");
      Py_INCREF(module);  // the functions live as long as the process
    }
    Py_DECREF(module);
    PyEval_SaveThread();  // the GIL is taken by each call, from whichever thread makes it
  });
  return e;
}

class Gil {
 public:
  Gil() : state_(PyGILState_Ensure()) {}
  ~Gil() { PyGILState_Release(state_); }
  Gil(const Gil&) = delete;
  Gil& operator=(const Gil&) = delete;

 private:
  PyGILState_STATE state_;
};

}  // namespace

Result<std::unique_ptr<ChatTemplate>> ChatTemplate::compile(const std::string& text, const std::string& source) {
  Engine& e = engine();
  if (!e.status.ok()) return Status::InvalidArgument(source + ": " + e.status.message());
  Gil gil;
  PyObject* arg = PyUnicode_DecodeUTF8(text.data(), static_cast<Py_ssize_t>(text.size()), "strict");
  if (!arg) return Status::InvalidArgument(source + ": the chat template is not UTF-8: " + take_error(e));
  PyObject* t = PyObject_CallOneArg(e.compile, arg);
  Py_DECREF(arg);
  if (!t) return Status::InvalidArgument(source + ": Jinja2 refused the chat template: " + take_error(e));
  std::unique_ptr<ChatTemplate> out(new ChatTemplate());
  out->template_ = t;
  out->source_ = source;
  PyObject* uni = PyUnicode_DecodeUTF8(text.data(), static_cast<Py_ssize_t>(text.size()), "strict");
  PyObject* parts = uni ? PyObject_CallOneArg(e.parts, uni) : nullptr;
  Py_XDECREF(uni);
  if (!parts) return Status::InvalidArgument(source + ": Jinja2 could not read the chat template: " + take_error(e));
  out->content_parts_ = PyObject_IsTrue(parts) == 1;
  Py_DECREF(parts);
  return out;
}

ChatTemplate::~ChatTemplate() {
  if (!template_) return;
  Gil gil;
  Py_DECREF(static_cast<PyObject*>(template_));
}

Result<std::string> ChatTemplate::render(const nlohmann::ordered_json& vars) const {
  Engine& e = engine();
  const std::string text = vars.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  Gil gil;
  PyObject* arg = PyUnicode_FromStringAndSize(text.data(), static_cast<Py_ssize_t>(text.size()));
  if (!arg) return Status::InvalidArgument(take_error(e));
  PyObject* out = PyObject_CallFunctionObjArgs(e.render, static_cast<PyObject*>(template_), arg, nullptr);
  Py_DECREF(arg);
  if (!out) return Status::InvalidArgument(take_error(e));
  Py_ssize_t n = 0;
  const char* s = PyUnicode_AsUTF8AndSize(out, &n);
  if (!s) {
    Py_DECREF(out);
    return Status::InvalidArgument("the rendered chat is not valid text: " + take_error(e));
  }
  std::string rendered(s, static_cast<size_t>(n));
  Py_DECREF(out);
  return rendered;
}

nlohmann::ordered_json special_token_vars(const tokenizer::Tokenizer& tok) {
  nlohmann::ordered_json vars = nlohmann::ordered_json::object();
  if (const auto bos = tok.bos_id()) vars["bos_token"] = tok.id_to_token(*bos);
  if (!tok.eos_ids().empty()) vars["eos_token"] = tok.id_to_token(tok.eos_ids()[0]);
  return vars;
}

Result<std::vector<int32_t>> render_and_encode(const ChatTemplate& tpl, const tokenizer::Tokenizer& tok,
                                               const nlohmann::ordered_json& messages, bool add_generation_prompt) {
  nlohmann::ordered_json vars = special_token_vars(tok);
  vars["messages"] = messages;
  vars["add_generation_prompt"] = add_generation_prompt;
  DZ_ASSIGN_OR_RETURN(std::string text, tpl.render(vars));
  return tok.encode(text, false);
}

Result<std::string> find_model_chat_template(const std::string& model_dir, std::string* source) {
  std::ifstream jinja(model_dir + "/chat_template.jinja");
  if (jinja) {
    std::stringstream ss;
    ss << jinja.rdbuf();
    if (source) *source = model_dir + "/chat_template.jinja";
    return ss.str();
  }
  const std::string cfg_path = model_dir + "/tokenizer_config.json";
  std::ifstream cfg(cfg_path);
  if (!cfg) return Status::NotFound(model_dir + ": no chat_template.jinja and no tokenizer_config.json");
  std::stringstream ss;
  ss << cfg.rdbuf();
  const json j = json::parse(ss.str(), nullptr, false);
  if (j.is_discarded()) return Status::Corrupt(cfg_path + ": not valid JSON");
  if (source) *source = cfg_path;
  if (j.contains("chat_template")) {
    const json& t = j["chat_template"];
    if (t.is_string()) return t.get<std::string>();
    if (t.is_array())
      for (const json& e : t)
        if (e.is_object() && e.value("name", "") == "default" && e.contains("template") && e["template"].is_string())
          return e["template"].get<std::string>();
  }
  return Status::NotFound(model_dir + ": the model has no chat template (tokenizer_config.json chat_template, chat_template.jinja)");
}

}  // namespace dayzero::chat
