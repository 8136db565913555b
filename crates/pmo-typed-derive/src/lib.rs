//! `#[derive(Persistent)]`: the compile-time gate for types that may live in a PMO.
//!
//! The derive emits `unsafe impl pmo_typed::Persistent` for a struct only when it can prove,
//! at compile time, the trait's contract (see `pmo_typed::Persistent`):
//! - it is a struct with `#[repr(C)]` or `#[repr(transparent)]` (a stable layout: the bytes
//!   outlive the program that wrote them), with no lifetime parameters (no references);
//! - every field implements `Persistent` (so `&T`, `Box`, `Vec`, `String`, `Rc`, raw pointers,
//!   `bool`, `char` and enums are refused: the error names the field's type);
//! - it implements no `Drop` (a conflicting-impl trick, as in `pin-project`);
//! - it has no padding and is not zero-sized (a const assertion: size == sum of field sizes),
//!   so every byte written to the medium is initialized and every bit pattern read back is
//!   a valid value.
//!
//! The generated impl forwards `for_each_block` / `release` to each field and derives
//! `LAYOUT` (a hash of the struct's name, field names and field layouts, used to refuse a
//! root of the wrong type).

use proc_macro::TokenStream;
use quote::{format_ident, quote};
use syn::{parse_macro_input, spanned::Spanned, Data, DeriveInput, Fields, GenericParam};

/// Derive `pmo_typed::Persistent` (see the crate documentation for what is checked).
#[proc_macro_derive(Persistent)]
pub fn derive_persistent(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    match expand(input) {
        Ok(ts) => ts.into(),
        Err(e) => e.to_compile_error().into(),
    }
}

fn has_stable_repr(input: &DeriveInput) -> bool {
    input.attrs.iter().any(|a| {
        if !a.path().is_ident("repr") {
            return false;
        }
        let mut ok = false;
        let _ = a.parse_nested_meta(|m| {
            if m.path.is_ident("C") || m.path.is_ident("transparent") {
                ok = true;
            }
            // Skip `align(N)` / `packed(N)` arguments.
            if m.input.peek(syn::token::Paren) {
                let _content;
                syn::parenthesized!(_content in m.input);
            }
            Ok(())
        });
        ok
    })
}

fn is_packed(input: &DeriveInput) -> bool {
    input.attrs.iter().any(|a| {
        let mut packed = false;
        if a.path().is_ident("repr") {
            let _ = a.parse_nested_meta(|m| {
                if m.path.is_ident("packed") {
                    packed = true;
                }
                if m.input.peek(syn::token::Paren) {
                    let _content;
                    syn::parenthesized!(_content in m.input);
                }
                Ok(())
            });
        }
        packed
    })
}

fn expand(mut input: DeriveInput) -> syn::Result<proc_macro2::TokenStream> {
    let name = input.ident.clone();
    let fields = match &input.data {
        Data::Struct(s) => s.fields.clone(),
        Data::Enum(e) => {
            return Err(syn::Error::new(
                e.enum_token.span(),
                "Persistent cannot be derived for an enum: not every bit pattern is a valid \
                 enum value, so bytes read back from the medium could be undefined behaviour; \
                 store the discriminant as an integer",
            ))
        }
        Data::Union(u) => {
            return Err(syn::Error::new(
                u.union_token.span(),
                "Persistent cannot be derived for a union",
            ))
        }
    };
    if let Some(l) = input.generics.lifetimes().next() {
        return Err(syn::Error::new(
            l.span(),
            "Persistent types cannot borrow: a reference stored in a PMO would dangle after \
             the next attach (use PBox, PVec or PString)",
        ));
    }
    if !has_stable_repr(&input) {
        return Err(syn::Error::new(
            name.span(),
            "Persistent types need #[repr(C)] or #[repr(transparent)]: the layout of bytes \
             in a PMO must not change with the compiler",
        ));
    }
    if is_packed(&input) {
        return Err(syn::Error::new(
            name.span(),
            "Persistent types cannot be #[repr(packed)]: their fields would be misaligned",
        ));
    }
    let members: Vec<proc_macro2::TokenStream> = match &fields {
        Fields::Named(f) => f
            .named
            .iter()
            .map(|f| {
                let id = f.ident.as_ref().expect("named");
                quote!(#id)
            })
            .collect(),
        Fields::Unnamed(f) => (0..f.unnamed.len())
            .map(|i| {
                let i = syn::Index::from(i);
                quote!(#i)
            })
            .collect(),
        Fields::Unit => Vec::new(),
    };
    if members.is_empty() {
        return Err(syn::Error::new(
            name.span(),
            "Persistent types cannot be empty (zero-sized)",
        ));
    }
    let types: Vec<&syn::Type> = fields.iter().map(|f| &f.ty).collect();
    let field_names: Vec<String> = members.iter().map(|m| m.to_string()).collect();
    let name_str = name.to_string();

    // Every type parameter must itself be Persistent.
    for p in input.generics.params.iter_mut() {
        if let GenericParam::Type(t) = p {
            t.bounds.push(syn::parse_quote!(::pmo_typed::Persistent));
        }
    }
    let (impl_g, ty_g, where_c) = input.generics.split_for_impl();
    let no_drop = format_ident!("__PmoTyped{}MustNotImplDrop", name);
    let generic = !input.generics.params.is_empty();
    // Non-generic: name each refused field's type at its span, and evaluate the padding check
    // at the definition. (Generic structs get both from the impl itself, at first use.)
    let assert_fields: Vec<_> = if generic {
        Vec::new()
    } else {
        types.iter().map(|t| quote_spanned_assert(t)).collect()
    };
    let layout_now = if generic {
        quote!()
    } else {
        quote!(const _: () = <#name as ::pmo_typed::Persistent>::LAYOUT_OK;)
    };

    Ok(quote! {
        // SAFETY: the derive checked the contract of `Persistent`: a repr(C)/transparent struct
        // with no lifetimes, every field `Persistent` (asserted below and by the forwarding
        // calls), no `Drop` impl (the conflicting impls below), and no padding (LAYOUT_OK,
        // evaluated by every method and by `pmo_typed`'s accessors).
        unsafe impl #impl_g ::pmo_typed::Persistent for #name #ty_g #where_c {
            const LAYOUT: u64 = {
                let mut h = ::pmo_typed::layout::hash_str(::pmo_typed::layout::SEED, #name_str);
                #(
                    h = ::pmo_typed::layout::hash_str(h, #field_names);
                    h = ::pmo_typed::layout::mix(h, <#types as ::pmo_typed::Persistent>::LAYOUT);
                )*
                h
            };
            const OWNS_BLOCKS: bool = false #( || <#types as ::pmo_typed::Persistent>::OWNS_BLOCKS )*;
            const LAYOUT_OK: () = {
                let fields = 0usize #( + ::core::mem::size_of::<#types>() )*;
                assert!(
                    fields == ::core::mem::size_of::<Self>(),
                    "Persistent types cannot have padding: add explicit `_pad: [u8; N]` fields"
                );
            };
            fn for_each_block(
                &self,
                h: &::pmo_typed::Ctx,
                f: &mut dyn FnMut(u64),
            ) -> ::pmo_typed::Result<()> {
                #[allow(clippy::let_unit_value)]
                let () = <Self as ::pmo_typed::Persistent>::LAYOUT_OK;
                #( ::pmo_typed::Persistent::for_each_block(&self.#members, h, f)?; )*
                Ok(())
            }
            fn release(&mut self, h: &::pmo_typed::Ctx) -> ::pmo_typed::Result<()> {
                #[allow(clippy::let_unit_value)]
                let () = <Self as ::pmo_typed::Persistent>::LAYOUT_OK;
                #( ::pmo_typed::Persistent::release(&mut self.#members, h)?; )*
                Ok(())
            }
            fn rebind(&mut self, h: &::pmo_typed::Ctx) -> ::pmo_typed::Result<()> {
                #( ::pmo_typed::Persistent::rebind(&mut self.#members, h)?; )*
                Ok(())
            }
        }
        const _: () = {
            #( #assert_fields )*
            trait #no_drop {}
            #[allow(drop_bounds)]
            impl<T: ::core::ops::Drop> #no_drop for T {}
            impl #impl_g #no_drop for #name #ty_g #where_c {}
            #layout_now
        };
    })
}

/// `fn _f() where FieldType: Persistent {}` pointing at the field's type, so the error for a
/// refused field names it.
fn quote_spanned_assert(t: &syn::Type) -> proc_macro2::TokenStream {
    quote::quote_spanned! {t.span()=>
        const _: fn() = || {
            fn assert_persistent<T: ?Sized + ::pmo_typed::Persistent>() {}
            let _ = assert_persistent::<#t>;
        };
    }
}
