// Each chapter page's version table against the registry it documents: the table whose header
// row starts with `version` lists, in its first column and in backticks, the names of the
// topic's registry (versions(); decode_versions() for chapter 04) in the same order; where the
// table has a `backends` column, a row says "cuda only" exactly when the version is
// Backends::cuda_only. The page and the code then cannot drift apart: a version added to the
// registry fails here until the page lists it.
//
// The repository is found from this file's path (__FILE__ is absolute in this build), so the
// test needs no configuration.
#include "../../kernels/attention/attention.hpp"
#include "../../kernels/attention/decode_attention.hpp"
#include "../../kernels/attention/flash_attention.hpp"
#include "../../kernels/attention/paged_attention.hpp"
#include "../../kernels/gemm/gemm.hpp"
#include "../../kernels/gemv/gemv.hpp"
#include "../../kernels/quant/quant.hpp"
#include "../../kernels/roofline/roofline.hpp"

#include "pd/registry.hpp"
#include "pd/serving/speculative.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

/// The repository root: three levels above this file (tests/cpu/test_pages.cpp).
fs::path repository_root() {
    const fs::path self(__FILE__);
    INFO("__FILE__ = " << self.string() << ": the test locates the chapter pages from it");
    REQUIRE(self.is_absolute());
    return self.parent_path().parent_path().parent_path();
}

std::string trim(const std::string& s) {
    const auto b = s.find_first_not_of(" \t\r");
    if (b == std::string::npos) return "";
    return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
}

std::string lower(std::string s) {
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return char(std::tolower(c)); });
    return s;
}

/// The cells of a markdown table line "| a | b |": {"a", "b"}, trimmed. Not a table line: {}.
std::vector<std::string> cells_of(const std::string& line) {
    const std::string t = trim(line);
    if (t.size() < 2 || t.front() != '|') return {};
    std::vector<std::string> cells;
    std::string cell;
    for (std::size_t i = 1; i < t.size(); ++i) {
        if (t[i] == '|') {
            cells.push_back(trim(cell));
            cell.clear();
        } else {
            cell += t[i];
        }
    }
    if (!trim(cell).empty()) cells.push_back(trim(cell));  // a last cell without its closing '|'
    return cells;
}

/// One row of a page's version table.
struct PageRow {
    std::string name;                     ///< the first cell's text in backticks ("" if none)
    std::string first_cell;               ///< the whole first cell, for messages
    std::optional<std::string> backends;  ///< the `backends` cell, when the table has that column
    int line = 0;                         ///< 1-based line of the page
};

/// The version table of the markdown page @p path: the rows after the header row whose first
/// cell is `version` and its separator row, up to the first line that is not a table row.
/// Empty when the page has no such table (the caller reports it).
std::vector<PageRow> version_table(const fs::path& path) {
    std::ifstream in(path);
    REQUIRE(in);
    std::vector<std::string> lines;
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    std::vector<PageRow> rows;
    for (std::size_t h = 0; h < lines.size(); ++h) {
        const std::vector<std::string> header = cells_of(lines[h]);
        if (header.empty() || lower(header[0]) != "version") continue;
        std::optional<std::size_t> backends_col;
        for (std::size_t c = 0; c < header.size(); ++c)
            if (lower(header[c]) == "backends") backends_col = c;
        for (std::size_t i = h + 2; i < lines.size(); ++i) {  // h + 1 is the |:---| separator
            const std::vector<std::string> cells = cells_of(lines[i]);
            if (cells.empty()) break;
            PageRow row;
            row.first_cell = cells[0];
            row.line = int(i + 1);
            const auto open = cells[0].find('`');
            const auto close = open == std::string::npos ? open : cells[0].find('`', open + 1);
            if (close != std::string::npos) row.name = cells[0].substr(open + 1, close - open - 1);
            if (backends_col) row.backends = *backends_col < cells.size() ? cells[*backends_col] : "";
            rows.push_back(row);
        }
        break;
    }
    return rows;
}

std::string joined(const std::vector<std::string>& names) {
    std::string out;
    for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
    return out.empty() ? "(none)" : out;
}

/// What is wrong with the version table of the page @p page (named @p where in messages)
/// against @p versions, the registry that @p registry_name names ("gemv::versions()", as the
/// messages print it): one line per problem, none when the table lists the registry's names in
/// order (in backticks) and, where it has a backends column, says "cuda only" exactly for the
/// Backends::cuda_only versions.
std::vector<std::string> page_problems(const fs::path& page, const std::string& where, const std::string& registry_name,
                                       const std::vector<pd::Version>& versions) {
    std::vector<std::string> problems;
    const std::vector<PageRow> rows = version_table(page);
    if (rows.empty()) return {where + " has no table whose header row starts with `version`"};

    std::vector<std::string> page_names;
    for (const PageRow& r : rows) {
        if (r.name.empty())
            problems.push_back(where + ":" + std::to_string(r.line) + ": the first cell '" + r.first_cell +
                               "' names no version in backticks");
        page_names.push_back(r.name);
    }
    const std::vector<std::string> registry = pd::names_of(versions);
    if (page_names != registry) {
        std::size_t d = 0;
        while (d < page_names.size() && d < registry.size() && page_names[d] == registry[d]) ++d;
        problems.push_back(where + "'s version table lists [" + joined(page_names) + "] but " + registry_name +
                           " has [" + joined(registry) + "]; first difference at row " + std::to_string(d + 1) +
                           ": the page has " +
                           (d < page_names.size() ? "`" + page_names[d] + "`" : std::string("nothing")) +
                           ", the registry " + (d < registry.size() ? registry[d] : std::string("nothing")));
    }

    // The backends column, for every row that names a registered version.
    for (const PageRow& r : rows) {
        if (!r.backends) continue;
        const auto v =
            std::find_if(versions.begin(), versions.end(), [&](const pd::Version& x) { return x.name == r.name; });
        if (v == versions.end()) continue;  // reported above
        const bool page_cuda_only = lower(*r.backends).find("cuda only") != std::string::npos;
        const bool cuda_only = v->backends == pd::Backends::cuda_only;
        if (page_cuda_only != cuda_only)
            problems.push_back(where + ":" + std::to_string(r.line) + ": `" + r.name + "` has backends '" +
                               *r.backends + "', but in " + registry_name + " it is " +
                               (cuda_only ? "Backends::cuda_only: the page must say \"cuda only\""
                                          : "Backends::all: the page must not say \"cuda only\""));
    }
    return problems;
}

/// Checks chapters/@p chapter/README.md against @p versions, the registry that @p registry_name names.
void check_page(const std::string& chapter, const std::string& registry_name,
                const std::vector<pd::Version>& versions) {
    const fs::path page = repository_root() / "chapters" / chapter / "README.md";
    INFO("page " << page.string());
    REQUIRE(fs::exists(page));
    const std::vector<std::string> problems =
        page_problems(page, "chapters/" + chapter + "/README.md", registry_name, versions);
    std::string text;
    for (const std::string& p : problems) text += p + "\n";
    INFO(text);
    CHECK(problems.empty());
}

}  // namespace

TEST_CASE("pages: the table parser and the checks it feeds, on pages written here", "[pages]") {
    // A table before the version table is skipped, the separator row is not a version, a row
    // without backticks gives an empty name, and the table ends at the first non-table line.
    const fs::path tmp = fs::temp_directory_path() / "pd_test_pages.md";
    auto write = [&](const std::string& text) {
        std::ofstream out(tmp);
        out << text;
    };
    write(
        "| option | meaning |\n| :-- | :-- |\n| `--kernel` | x |\n\n"
        "Text.\n\n| version | what | backends |\n| :------ | :--- | :------- |\n"
        "| `v1` | a | cuda, sim |\n|`v2`|b|cuda only (sm_80+)|\n| v3 | c | cuda, sim |\n"
        "\n| `v9` | after the table | cuda only |\n");
    const std::vector<PageRow> rows = version_table(tmp);
    REQUIRE(rows.size() == 3);
    CHECK(rows[0].name == "v1");
    CHECK(rows[0].backends == std::optional<std::string>("cuda, sim"));
    CHECK(rows[0].line == 9);
    CHECK(rows[1].name == "v2");
    CHECK(rows[1].backends == std::optional<std::string>("cuda only (sm_80+)"));
    CHECK(rows[2].name.empty());
    CHECK(rows[2].first_cell == "v3");

    // Against a registry v1, v2 (CUDA only), v3: the row without backticks is reported, and
    // with it the names differ at row 3.
    const std::vector<pd::Version> registry = {{"v1", {pd::DType::fp32}, pd::Units::simt, "a"},
                                               {"v2", {pd::DType::fp32}, pd::Units::simt, "b", pd::Backends::cuda_only},
                                               {"v3", {pd::DType::fp32}, pd::Units::simt, "c"}};
    std::vector<std::string> p = page_problems(tmp, "test.md", "topic::versions()", registry);
    REQUIRE(p.size() == 2);
    CHECK_THAT(p[0], Catch::Matchers::Contains("test.md:11: the first cell 'v3' names no version in backticks"));
    CHECK_THAT(p[1], Catch::Matchers::Contains("lists [v1, v2, ] but topic::versions() has [v1, v2, v3]") &&
                         Catch::Matchers::Contains("first difference at row 3"));

    // A page missing the last version, and one marking the wrong version CUDA only.
    write("| version | backends |\n| :-- | :-- |\n| `v1` | cuda, sim |\n| `v2` | cuda only |\n");
    p = page_problems(tmp, "test.md", "topic::versions()", registry);
    REQUIRE(p.size() == 1);
    CHECK_THAT(p[0], Catch::Matchers::Contains("the page has nothing, the registry v3"));
    write("| version | backends |\n| :-- | :-- |\n| `v1` | cuda only |\n| `v2` | cuda, sim |\n| `v3` | sim |\n");
    p = page_problems(tmp, "test.md", "topic::versions()", registry);
    REQUIRE(p.size() == 2);
    CHECK_THAT(p[0],
               Catch::Matchers::Contains("`v1` has backends 'cuda only'") && Catch::Matchers::Contains("must not say"));
    CHECK_THAT(p[1], Catch::Matchers::Contains("`v2` has backends 'cuda, sim'") &&
                         Catch::Matchers::Contains("must say \"cuda only\""));
    // The right page has no problem; a page without a version table has one.
    write("| version | backends |\n| :-- | :-- |\n| `v1` | all |\n| `v2` | cuda only |\n| `v3` | sim |\n");
    CHECK(page_problems(tmp, "test.md", "topic::versions()", registry).empty());
    write("# no table\n");
    CHECK(page_problems(tmp, "test.md", "topic::versions()", registry) ==
          std::vector<std::string>{"test.md has no table whose header row starts with `version`"});
    fs::remove(tmp);
}

TEST_CASE("pages: chapter 00's table lists roofline::versions()", "[pages]") {
    check_page("00_roofline", "roofline::versions()", pd::kernels::roofline::versions());
}

TEST_CASE("pages: chapter 01's table lists attention::versions() and its backends", "[pages]") {
    check_page("01_naive_attention", "attention::versions()", pd::kernels::attention::versions());
}

TEST_CASE("pages: chapter 02's table lists gemm::versions() and its backends", "[pages]") {
    check_page("02_prefill_gemm", "gemm::versions()", pd::kernels::gemm::versions());
}

TEST_CASE("pages: chapter 03's table lists gemv::versions() and its backends", "[pages]") {
    check_page("03_decode_gemv", "gemv::versions()", pd::kernels::gemv::versions());
}

TEST_CASE("pages: chapter 04's table lists model::decode_versions() and its backends", "[pages]") {
    check_page("04_kv_cache", "model::decode_versions()", pd::kernels::attention::decode_versions());
}

TEST_CASE("pages: chapter 06's table lists model::paged_versions() and its backends", "[pages]") {
    check_page("06_paged_kv", "model::paged_versions()", pd::kernels::attention::paged_versions());
}

TEST_CASE("pages: chapter 07's table lists attention::flash_versions() and its backends", "[pages]") {
    check_page("07_flash_attention", "attention::flash_versions()", pd::kernels::attention::flash_versions());
}

TEST_CASE("pages: chapter 08's table lists quant::versions() and its backends", "[pages]") {
    check_page("08_quantized_decode", "quant::versions()", pd::kernels::quant::versions());
}

TEST_CASE("pages: chapter 09's table lists serving::proposer_versions() and its backends", "[pages]") {
    check_page("09_speculative", "serving::proposer_versions()", pd::serving::proposer_versions());
}
