//! The OpenAPI 3.1 document served at `/openapi.json`, made from
//! the route list (`crate::api::routes`), given to [`document`]: the router
//! and the document come from one list,
//! so every route served is documented and nothing documented is missing.

use serde_json::{Map, Value, json};

use crate::limits::REQUEST_BODY_BYTES_MAX;
use crate::route::Route;

/// The path in OpenAPI syntax: axum's `{*rest}` becomes `{rest}`.
pub fn openapi_path(path: &str) -> String {
    path.replace("{*", "{")
}

/// The path's parameter names, in order.
fn path_parameters(path: &str) -> Vec<String> {
    openapi_path(path)
        .split('/')
        .filter_map(|segment| segment.strip_prefix('{')?.strip_suffix('}'))
        .map(str::to_owned)
        .collect()
}

/// The document of `routes`.
pub fn document(routes: &[Route]) -> Value {
    let mut paths = Map::new();
    for route in routes {
        let mut parameters: Vec<Value> = path_parameters(route.path)
            .into_iter()
            .map(|name| {
                let description = if name == "id" {
                    "session id (UUID)"
                } else {
                    "workspace path, slash-separated, in the escaped text form of docs/names.md"
                };
                json!({"name": name, "in": "path", "required": true, "description": description, "schema": {"type": "string"}})
            })
            .collect();
        parameters.extend(route.query.iter().map(|(name, kind, description)| {
            json!({"name": name, "in": "query", "required": false, "description": description, "schema": {"type": kind}})
        }));
        let mut operation = json!({
            "summary": route.summary,
            "operationId": format!("{} {}", route.method, route.path),
            "parameters": parameters,
            "responses": {
                "200": {"description": "success", "content": {route.response: {}}},
                "default": {
                    "description": "an error: 400/422 bad input, 401 no or wrong token, 404 not found, 409 conflict or busy, 413 too large, 500 integrity or I/O",
                    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
                }
            }
        });
        if let (Some(body), Some(object)) = (route.body, operation.as_object_mut()) {
            object.insert(
                "requestBody".into(),
                json!({"required": body != "application/json", "content": {body: {}}}),
            );
        }
        let entry = paths
            .entry(openapi_path(route.path))
            .or_insert_with(|| json!({}));
        if let Some(object) = entry.as_object_mut() {
            object.insert(route.method.as_str().to_lowercase(), operation);
        }
    }
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "sandlog",
            "version": env!("CARGO_PKG_VERSION"),
            "description": format!("sandlog's HTTP JSON API (`sandlog serve`). Bodies are limited to {REQUEST_BODY_BYTES_MAX} bytes. When the server has a token, every request needs `Authorization: Bearer TOKEN`."),
        },
        "paths": paths,
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": {
                "Error": {
                    "type": "object",
                    "required": ["error", "message", "hint"],
                    "properties": {
                        "error": {"type": "string", "description": "stable kind, as the CLI's --json errors"},
                        "message": {"type": "string"},
                        "hint": {"type": "string", "description": "what to do about it"}
                    }
                }
            }
        },
        "security": [{"bearer": []}],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_route_is_documented_with_its_parameters() {
        let routes = crate::api::routes();
        let document = document(&routes);
        for route in &routes {
            let path = openapi_path(route.path);
            let operation = &document["paths"][&path][route.method.as_str().to_lowercase()];
            assert!(
                operation.is_object(),
                "{} {} is not in the document",
                route.method,
                route.path
            );
            let documented: Vec<&str> = operation["parameters"]
                .as_array()
                .map(|parameters| {
                    parameters
                        .iter()
                        .filter_map(|parameter| parameter["name"].as_str())
                        .collect()
                })
                .unwrap_or_default();
            for name in path_parameters(route.path) {
                assert!(documented.contains(&name.as_str()), "{path}: {name}");
            }
        }
    }

    #[test]
    fn the_rest_of_a_path_is_one_parameter() {
        assert_eq!(
            openapi_path("/v1/sessions/{id}/files/{*path}"),
            "/v1/sessions/{id}/files/{path}"
        );
        assert_eq!(
            path_parameters("/v1/sessions/{id}/files/{*path}"),
            vec!["id", "path"]
        );
    }
}
