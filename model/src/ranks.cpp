/// @file ranks.cpp
/// @brief Chapter 10's ranks in the model (model.hpp): a call run on every rank, each on its own
/// host thread and device (built by rank 0), and the all-reduce of a rank's partial sums.
#include "pd/model/model.hpp"

#include "pd/model/rank_group.hpp"

#include <cstddef>
#include <exception>
#include <functional>
#include <memory>

namespace pd::model {

void Model::build_ranks() {  // rank 0 builds the other ranks, each on its device, in its thread
    group_ = std::make_unique<RankGroup>(options_.parallel.ranks);
    for (std::size_t i = 0; i < group_->ranks.size(); ++i) {
        ModelOptions other = options_;
        other.parallel.rank = int(i) + 1;
        group_->post(i,
                     [this, other, k = group_->ranks[i].get()] { k->model = std::make_unique<Model>(full_, other); });
    }
    for (std::size_t i = 0; i < group_->ranks.size(); ++i)
        if (std::exception_ptr e = group_->wait(i)) std::rethrow_exception(e);
}

void Model::on_every_rank(const std::function<void(Model&)>& f) {
    if (!group_) return f(*this);
    for (std::size_t i = 0; i < group_->ranks.size(); ++i)
        group_->post(i, [&f, k = group_->ranks[i].get()] { f(*k->model); });
    std::exception_ptr error;
    try {
        f(*this);
    } catch (...) {
        error = std::current_exception();
    }
    for (std::size_t i = 0; i < group_->ranks.size(); ++i)
        if (std::exception_ptr e = group_->wait(i); e && !error) error = e;
    if (error) std::rethrow_exception(error);
}

void Model::all_reduce(float* data, std::size_t count) {
    if (options_.parallel.ranks == 1) return;
    options_.parallel.collectives->all_reduce_sum(options_.parallel.rank, data, count);
    ++communication_.calls;
    communication_.bytes += double(count) * sizeof(float);
}

}  // namespace pd::model
