// detail::rethrow_with_context: an error re-thrown with where it happened (DataParallel replicas).
#include <cxxabi.h>
#include <cstdlib>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <typeinfo>
#include "dp/core/errors.h"

namespace dp::detail {
namespace {

std::string type_name(const std::type_info& t) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> d(abi::__cxa_demangle(t.name(), nullptr, nullptr, &status), std::free);
  return status == 0 && d ? d.get() : t.name();
}

// Throws a standard exception of the same type as `e` with message `msg`: the standard types can't
// change their message, so they are rebuilt (most derived first).
template <typename... Types>
[[noreturn]] void throw_as(const std::exception& e, const std::string& msg) {
  (([&] {
     if (typeid(e) == typeid(Types)) throw Types(msg);
   }()),
   ...);
  (([&] {
     if (dynamic_cast<const Types*>(&e) != nullptr) throw Types(msg);
   }()),
   ...);
  throw Error(msg);
}

std::string caught(const std::type_info& type, const std::string& where) {
  return "Caught " + type_name(type) + " " + where + ".\nOriginal message: ";
}

}  // namespace

void rethrow_with_context(std::exception_ptr error, const std::string& where) {
  try {
    std::rethrow_exception(error);
  } catch (const std::bad_alloc&) {
    throw;  // can't carry a message; its type says enough
  } catch (Error& e) {
    e.add_context(caught(typeid(e), where));
    throw;  // the same object: its type survives, whatever subclass it is
  } catch (const std::exception& e) {
    throw_as<std::invalid_argument, std::domain_error, std::length_error, std::out_of_range, std::range_error, std::overflow_error,
             std::underflow_error, std::logic_error, std::runtime_error>(e, caught(typeid(e), where) + e.what());
  } catch (...) {
    throw Error("Caught an exception of unknown type " + where + ".");
  }
}

std::exception_ptr with_context(std::exception_ptr error, const std::string& where) {
  try {
    rethrow_with_context(std::move(error), where);
  } catch (...) {
    return std::current_exception();
  }
}

}  // namespace dp::detail
