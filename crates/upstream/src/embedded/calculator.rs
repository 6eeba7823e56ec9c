//! `calculator`: arithmetic on decimal numbers.
//!
//! A small recursive-descent evaluator over f64: `+ - * / % ^`, parentheses, unary minus,
//! `pi`, `e` and common functions. Hand-written because the expression crates found either
//! divide integers as integers (7/2 = 3) or evaluate far more than arithmetic; this one is
//! bounded in length and nesting so no input can exhaust the stack.

use rmcp::model::*;
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Value, json};

use super::schema;

pub struct Calculator;

const MAX_EXPRESSION: usize = 1000;
const MAX_DEPTH: usize = 64;

struct Parser<'a> {
    input: &'a [u8],
    at: usize,
    depth: usize,
}

type Eval = Result<f64, String>;

impl<'a> Parser<'a> {
    fn skip_blanks(&mut self) {
        while self
            .input
            .get(self.at)
            .is_some_and(|c| c.is_ascii_whitespace())
        {
            self.at += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.skip_blanks();
        self.input.get(self.at).copied()
    }

    fn eat(&mut self, c: u8) -> bool {
        if self.peek() == Some(c) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    fn nested<T>(&mut self, f: impl FnOnce(&mut Self) -> Result<T, String>) -> Result<T, String> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(format!("nested deeper than {MAX_DEPTH} levels"));
        }
        let result = f(self);
        self.depth -= 1;
        result
    }

    fn expression(&mut self) -> Eval {
        self.nested(|p| {
            let mut value = p.term()?;
            loop {
                if p.eat(b'+') {
                    value += p.term()?;
                } else if p.eat(b'-') {
                    value -= p.term()?;
                } else {
                    return Ok(value);
                }
            }
        })
    }

    fn term(&mut self) -> Eval {
        let mut value = self.unary()?;
        loop {
            if self.eat(b'*') {
                value *= self.unary()?;
            } else if self.eat(b'/') {
                let divisor = self.unary()?;
                if divisor == 0.0 {
                    return Err("division by zero".into());
                }
                value /= divisor;
            } else if self.eat(b'%') {
                let divisor = self.unary()?;
                if divisor == 0.0 {
                    return Err("division by zero".into());
                }
                value %= divisor;
            } else {
                return Ok(value);
            }
        }
    }

    fn unary(&mut self) -> Eval {
        self.nested(|p| {
            if p.eat(b'-') {
                Ok(-p.unary()?)
            } else if p.eat(b'+') {
                p.unary()
            } else {
                let base = p.atom()?;
                if p.eat(b'^') {
                    Ok(base.powf(p.unary()?))
                } else {
                    Ok(base)
                }
            }
        })
    }

    fn atom(&mut self) -> Eval {
        match self.peek() {
            Some(b'(') => {
                self.at += 1;
                let value = self.expression()?;
                if !self.eat(b')') {
                    return Err(format!("expected ')' at position {}", self.at + 1));
                }
                Ok(value)
            }
            Some(c) if c.is_ascii_digit() || c == b'.' => self.number(),
            Some(c) if c.is_ascii_alphabetic() => self.name(),
            Some(c) => Err(format!(
                "unexpected '{}' at position {}",
                c as char,
                self.at + 1
            )),
            None => Err("the expression ended early".into()),
        }
    }

    fn number(&mut self) -> Eval {
        let start = self.at;
        while self
            .input
            .get(self.at)
            .is_some_and(|c| c.is_ascii_digit() || *c == b'.')
        {
            self.at += 1;
        }
        if matches!(self.input.get(self.at), Some(b'e' | b'E'))
            && self
                .input
                .get(self.at + 1)
                .is_some_and(|c| c.is_ascii_digit() || *c == b'-' || *c == b'+')
        {
            self.at += 2;
            while self.input.get(self.at).is_some_and(u8::is_ascii_digit) {
                self.at += 1;
            }
        }
        let text = std::str::from_utf8(&self.input[start..self.at]).unwrap_or_default();
        text.parse()
            .map_err(|_| format!("'{text}' is not a number"))
    }

    fn name(&mut self) -> Eval {
        let start = self.at;
        while self
            .input
            .get(self.at)
            .is_some_and(u8::is_ascii_alphanumeric)
        {
            self.at += 1;
        }
        let name = std::str::from_utf8(&self.input[start..self.at])
            .unwrap_or_default()
            .to_ascii_lowercase();
        match name.as_str() {
            "pi" => return Ok(std::f64::consts::PI),
            "e" => return Ok(std::f64::consts::E),
            _ => {}
        }
        if !self.eat(b'(') {
            return Err(format!("unknown name '{name}'"));
        }
        let mut args = vec![self.expression()?];
        while self.eat(b',') {
            args.push(self.expression()?);
        }
        if !self.eat(b')') {
            return Err(format!("expected ')' after the arguments of {name}"));
        }
        let one = |f: fn(f64) -> f64| match args.as_slice() {
            [x] => Ok(f(*x)),
            _ => Err(format!("{name} takes one argument")),
        };
        match name.as_str() {
            "sqrt" => one(f64::sqrt),
            "abs" => one(f64::abs),
            "sin" => one(f64::sin),
            "cos" => one(f64::cos),
            "tan" => one(f64::tan),
            "ln" => one(f64::ln),
            "log10" | "log" => one(f64::log10),
            "exp" => one(f64::exp),
            "floor" => one(f64::floor),
            "ceil" => one(f64::ceil),
            "round" => one(f64::round),
            "min" => Ok(args.iter().copied().fold(f64::INFINITY, f64::min)),
            "max" => Ok(args.iter().copied().fold(f64::NEG_INFINITY, f64::max)),
            "pow" => match args.as_slice() {
                [x, y] => Ok(x.powf(*y)),
                _ => Err("pow takes two arguments".into()),
            },
            _ => Err(format!("unknown function '{name}'")),
        }
    }
}

/// Evaluates an arithmetic expression.
pub(crate) fn evaluate(expression: &str) -> Result<f64, String> {
    if expression.len() > MAX_EXPRESSION {
        return Err(format!(
            "the expression is longer than {MAX_EXPRESSION} characters"
        ));
    }
    let mut parser = Parser {
        input: expression.as_bytes(),
        at: 0,
        depth: 0,
    };
    let value = parser.expression()?;
    if parser.peek().is_some() {
        return Err(format!("unexpected text at position {}", parser.at + 1));
    }
    if !value.is_finite() {
        return Err("the result is not a finite number".into());
    }
    Ok(value)
}

/// A number as people write it: no `.0` on integers.
fn format_number(value: f64) -> String {
    if value.fract() == 0.0 && value.abs() < 1e15 {
        format!("{}", value as i64)
    } else {
        format!("{value}")
    }
}

impl ServerHandler for Calculator {
    fn get_info(&self) -> ServerConfig {
        InitializeResult::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new(
                "mcp-pool calculator",
                env!("CARGO_PKG_VERSION"),
            ))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(vec![
            Tool::new(
                "calculate",
                "Evaluates an arithmetic expression: + - * / % ^, parentheses, pi, e, sqrt, \
                 abs, sin, cos, tan, ln, log10, exp, floor, ceil, round, min, max, pow",
                schema(json!({
                    "type": "object",
                    "properties": {"expression": {"type": "string", "maxLength": MAX_EXPRESSION}},
                    "required": ["expression"],
                })),
            ),
            Tool::new(
                "add",
                "Adds two numbers",
                schema(json!({
                    "type": "object",
                    "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                    "required": ["a", "b"],
                })),
            ),
        ]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let argument = |name: &str| request.arguments.as_ref().and_then(|a| a.get(name));
        let result = match request.name.as_ref() {
            "calculate" => {
                let expression = argument("expression")
                    .and_then(Value::as_str)
                    .ok_or_else(|| ErrorData::invalid_params("expression is required", None))?;
                evaluate(expression)
            }
            "add" => match (
                argument("a").and_then(Value::as_f64),
                argument("b").and_then(Value::as_f64),
            ) {
                (Some(a), Some(b)) => Ok(a + b),
                _ => return Err(ErrorData::invalid_params("a and b are required", None)),
            },
            other => {
                return Err(ErrorData::invalid_params(
                    format!("unknown tool '{other}'"),
                    None,
                ));
            }
        };
        Ok(match result {
            Ok(value) => CallToolResult::success(vec![ContentBlock::text(format_number(value))]),
            Err(problem) => CallToolResult::error(vec![ContentBlock::text(problem)]),
        }
        .into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_follows_the_usual_rules() {
        let cases = [
            ("1 + 2 * 3", 7.0),
            ("(1 + 2) * 3", 9.0),
            ("7 / 2", 3.5),
            ("-2 ^ 2", -4.0),
            ("2 ^ 3 ^ 2", 512.0),
            ("10 % 4", 2.0),
            ("sqrt(16) + abs(-3)", 7.0),
            ("max(1, 5, 3) - min(4, 2)", 3.0),
            ("1.5e3 / 10", 150.0),
            ("round(pi * 100)", 314.0),
        ];
        for (expression, expected) in cases {
            assert_eq!(evaluate(expression), Ok(expected), "{expression}");
        }
        assert_eq!(format_number(3.0), "3");
        assert_eq!(format_number(3.5), "3.5");
    }

    #[test]
    fn bad_input_is_an_error_not_a_crash() {
        for bad in [
            "",
            "1 +",
            "1 / 0",
            "(1",
            "foo",
            "nope(1)",
            "1 2",
            "sqrt(1, 2)",
            "9^999",
        ] {
            assert!(evaluate(bad).is_err(), "{bad}");
        }
        assert!(evaluate(&"(".repeat(500)).unwrap_err().contains("nested"));
        assert!(evaluate(&"-".repeat(500)).unwrap_err().contains("nested"));
        assert!(evaluate(&"1+".repeat(600)).is_err());
    }
}
