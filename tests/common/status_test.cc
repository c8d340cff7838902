#include "common/status.h"

#include <gtest/gtest.h>

#include <set>

#include "common/result.h"

namespace ff {
namespace {

constexpr StatusCode kAllCodes[] = {
#define FF_STATUS_LIST(name, err, grpc) StatusCode::name,
    FF_STATUS_CODES(FF_STATUS_LIST)
#undef FF_STATUS_LIST
};

TEST(StatusTest, DefaultIsOk) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kOk);
  EXPECT_EQ(s.ToString(), "OK");
  EXPECT_EQ(s.ToErrno(), 0);
  EXPECT_EQ(s.message(), "");
}

TEST(StatusTest, CarriesCodeAndMessage) {
  Status s(StatusCode::kNotEmpty, "rmdir /a: directory not empty");
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(s.Is(StatusCode::kNotEmpty));
  EXPECT_EQ(s.ToString(), "NotEmpty: rmdir /a: directory not empty");
  EXPECT_EQ(s.ToErrno(), ENOTEMPTY);
}

TEST(StatusTest, BuildingWithOkCodeIsOk) {
  Status s(StatusCode::kOk, "ignored");
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.message(), "");
}

TEST(StatusTest, WithContextPrefixesMessageAndKeepsCode) {
  Status s = NotFound("chunk 7").WithContext("fs3-storage read");
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "fs3-storage read: chunk 7");
  EXPECT_TRUE(Status::Ok().WithContext("x").ok());
}

TEST(StatusTest, FromErrnoUsesStrerrorAndMapsCode) {
  Status s = Status::FromErrno(ENOENT, "open /x");
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "open /x: No such file or directory");
  EXPECT_TRUE(Status::FromErrno(0, "nothing").ok());
}

TEST(StatusTest, EveryCodeHasAUniqueNameThatRoundTrips) {
  std::set<std::string_view> names;
  for (StatusCode code : kAllCodes) {
    std::string_view name = StatusCodeName(code);
    EXPECT_TRUE(names.insert(name).second) << "duplicate name " << name;
    StatusCode back;
    ASSERT_TRUE(StatusCodeFromName(name, &back)) << name;
    EXPECT_EQ(back, code);
  }
  StatusCode ignored;
  EXPECT_FALSE(StatusCodeFromName("NoSuchCode", &ignored));
}

TEST(StatusTest, ErrnoRoundTripsForEveryCodeThatOwnsItsErrno) {
  for (StatusCode code : kAllCodes) {
    int err = StatusCodeToErrno(code);
    StatusCode back = StatusCodeFromErrno(err);
    // Several codes may share an errno; the first row owns it, and the others map to it.
    EXPECT_EQ(StatusCodeToErrno(back), err) << StatusCodeName(code);
  }
}

TEST(StatusTest, ErrnoMappingsFilesystemsRelyOn) {
  struct Case {
    int err;
    StatusCode code;
  } cases[] = {
      {ENOENT, StatusCode::kNotFound},
      {EEXIST, StatusCode::kAlreadyExists},
      {ENOTDIR, StatusCode::kNotADirectory},
      {EISDIR, StatusCode::kIsADirectory},
      {ENOTEMPTY, StatusCode::kNotEmpty},
      {EACCES, StatusCode::kPermissionDenied},
      {EPERM, StatusCode::kNotPermitted},
      {ENAMETOOLONG, StatusCode::kNameTooLong},
      {EXDEV, StatusCode::kCrossDevice},
      {ENODATA, StatusCode::kNoAttribute},
      {EIO, StatusCode::kIoError},
      {ENOSPC, StatusCode::kResourceExhausted},
      {EINVAL, StatusCode::kInvalidArgument},
      {ETIMEDOUT, StatusCode::kDeadlineExceeded},
      {ENOTSUP, StatusCode::kNotSupported},
      {EWOULDBLOCK, StatusCode::kAborted},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(StatusCodeFromErrno(c.err), c.code) << c.err;
    EXPECT_EQ(StatusCodeToErrno(c.code), c.err == ENOTSUP       ? EOPNOTSUPP
                                         : c.err == EWOULDBLOCK ? EAGAIN
                                                                : c.err);
  }
  EXPECT_EQ(StatusCodeFromErrno(12345), StatusCode::kIoError);
}

Result<int> Half(int x) {
  if (x % 2 != 0) return InvalidArgument(std::to_string(x) + " is odd");
  return x / 2;
}

Result<int> Quarter(int x) {
  FF_ASSIGN_OR_RETURN(int h, Half(x));
  FF_ASSIGN_OR_RETURN(int q, Half(h));
  return q;
}

Status CheckEven(int x) {
  FF_RETURN_IF_ERROR(Half(x).status());
  return Status::Ok();
}

TEST(ResultTest, HoldsValueOrStatus) {
  Result<int> good = Half(8);
  ASSERT_TRUE(good.ok());
  EXPECT_EQ(*good, 4);
  EXPECT_TRUE(good.status().ok());

  Result<int> bad = Half(3);
  EXPECT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.value_or(-1), -1);
}

TEST(ResultTest, MacrosPropagateTheFirstError) {
  EXPECT_EQ(*Quarter(8), 2);
  Result<int> r = Quarter(6);  // 6 -> 3 -> error
  EXPECT_EQ(r.status().message(), "3 is odd");
  EXPECT_TRUE(CheckEven(2).ok());
  EXPECT_EQ(CheckEven(1).code(), StatusCode::kInvalidArgument);
}

TEST(ResultTest, OkStatusWithoutValueBecomesInternalError) {
  Result<std::string> r{Status::Ok()};
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInternal);
}

TEST(ResultTest, MoveOnlyValues) {
  Result<std::unique_ptr<int>> r = std::make_unique<int>(5);
  ASSERT_TRUE(r.ok());
  std::unique_ptr<int> p = std::move(r).value();
  EXPECT_EQ(*p, 5);
}

TEST(ResultDeathTest, ValueOnErrorAborts) {
  Result<int> r = Half(1);
  EXPECT_DEATH((void)r.value(), "Result::value\\(\\) on error: InvalidArgument: 1 is odd");
}

}  // namespace
}  // namespace ff
