#include "server/core/sites.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace ringd {

std::unique_ptr<Sites> BuildSites(const Config& config, const std::vector<int>& root_fds,
                                  std::string* error) {
  auto sites = std::make_unique<Sites>();
  sites->unknown = config.unknown_site;
  sites->configs = config.sites;
  sites->sites.reserve(config.sites.size());
  for (size_t i = 0; i < sites->configs.size(); ++i) {
    const SiteConfig& site = sites->configs[i];
    const std::string what = "--site " + site.name() + ": ";
    if (!sites->table.Add(site.names, error)) {
      *error = what + *error;
      return nullptr;
    }
    int fd = i < root_fds.size() ? root_fds[i] : -1;
    if (fd < 0) fd = ::open(site.root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
      *error = what + "--root: cannot open '" + site.root + "': " + std::strerror(errno);
      return nullptr;
    }
    sites->roots.push_back(
        std::make_unique<DocumentRoot>(site.root, fd, "--site " + site.name() + ": --root"));
    if (::faccessat(fd, ".", X_OK, AT_EACCESS) != 0) {
      *error = what + "--root: the user ringd serves as cannot search '" + site.root +
               "': " + std::strerror(errno);
      return nullptr;
    }
    sites->sites.push_back(SiteRuntime{site.name(), sites->roots.back()->state_word(), -1,
                                       site.index, site.own_origin ? &site.origin : nullptr,
                                       site.client_rules.empty() ? nullptr : &site.client_rules,
                                       site.autoindex, site.autoindex_format});
  }
  return sites;
}

}  // namespace ringd
