// dayzero inspect MODEL_DIR: what a checkpoint is and whether dayzero can run it.
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "runtime/model_loader.h"

namespace dayzero::cli {

void add_inspect_command(CLI::App& app, Commands& commands) {
  auto dir = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand("inspect", "Describe a model folder and check its tensors");
  cmd->add_option("model", *dir, "Model folder (config.json + safetensors)")->required();
  cmd->callback([&commands, dir] {
    commands.action = [dir] {
      auto m = runtime::open_model(*dir);
      if (!m.ok()) {
        std::cerr << "dayzero inspect: " << m.status().message() << std::endl;
        return m.status().exit_code();
      }
      const auto& hp = m->hp;
      int64_t params = 0;
      for (const auto& s : m->specs) params += shape_numel(s.shape);
      std::cout << "family      " << hp.family << " (model_type " << hp.model_type << ")\n"
                << "layers      " << hp.n_layer << ", hidden " << hp.n_embd << ", heads " << hp.n_head << "/"
                << hp.n_head_kv << " (q/kv), head_dim " << hp.head_dim << ", ffn " << hp.n_ff << "\n"
                << "vocab       " << hp.n_vocab << (hp.tie_embeddings ? " (tied lm_head)" : "") << "\n"
                << "rope        theta " << hp.rope_theta << ", scaling " << hp.rope_scaling.type << "\n"
                << "parameters  " << params << "\n"
                << "tensors     " << m->catalog.tensors().size() << " in " << m->catalog.files().size()
                << " file(s), " << m->catalog.total_bytes() << " bytes\n";
      const Status s = runtime::check_tensors(*m);
      std::cout << "check       " << (s.ok() ? "ok" : s.message()) << std::endl;
      return s.exit_code();
    };
  });
}

}  // namespace dayzero::cli
